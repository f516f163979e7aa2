package tenure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/notify"
)

// TestRefusalWait pins when a refused call tries again: RetryIn after the
// refused request was sent (plus retryPad), not after its reply came back;
// RetryIn from the wait when the send time is unknown; at once when that
// time has passed.
func TestRefusalWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sent := time.Now()
		time.Sleep(30 * time.Millisecond) // the round trip of the refused call
		for _, c := range []struct {
			name string
			r    Refusal
			want time.Duration
		}{
			{"anchored at the send", Refusal{RetryIn: 100 * time.Millisecond, Sent: sent}, 70*time.Millisecond + retryPad},
			{"send time unknown", Refusal{RetryIn: 100 * time.Millisecond}, 100 * time.Millisecond},
			{"expired on the way back", Refusal{RetryIn: 10 * time.Millisecond, Sent: sent}, 0},
		} {
			if got := c.r.wait(); got != c.want {
				t.Errorf("%s: wait() = %s, want %s", c.name, got, c.want)
			}
		}
	})
}

// TestAwaitRetriesTransient: a blocking call whose try fails with 40001 or
// 40P01 (which the functions document as "retry the call", nothing
// changed) tries again after a backoff, and returns what a later try
// decides; any other error returns at once; a context that ends during
// the backoff returns ctx.Err(); in the caller's transaction, which the
// server aborted, the failure is returned at once.
func TestAwaitRetriesTransient(t *testing.T) {
	c := &Core{hub: notify.NewHub(nil, 0, slog.New(slog.DiscardHandler))}
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		start := time.Now()
		got, err := Await(t.Context(), c, func(context.Context) (int, *Refusal, error) {
			tries++
			switch tries {
			case 1:
				return 0, nil, fmt.Errorf("pglease: %w", &pgconn.PgError{Code: "40P01"})
			case 2:
				return 0, nil, &pgconn.PgError{Code: "40001"}
			}
			return 7, nil, nil
		})
		if got != 7 || err != nil || tries != 3 {
			t.Fatalf("Await = %d, %v after %d tries, want 7, nil after 3", got, err, tries)
		}
		if took := time.Since(start); took < minTransient/2 || took > 3*minTransient {
			t.Errorf("two transient failures took %v of backoff, want between %v and %v", took, minTransient/2, 3*minTransient)
		}

		other := &pgconn.PgError{Code: "42501"}
		tries = 0
		if _, err := Await(t.Context(), c, func(context.Context) (int, *Refusal, error) {
			tries++
			return 0, nil, other
		}); !errors.Is(err, other) || tries != 1 {
			t.Fatalf("Await = %v after %d tries, want the 42501 after 1", err, tries)
		}

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := Await(ctx, c, func(context.Context) (int, *Refusal, error) {
			return 0, nil, &pgconn.PgError{Code: "40001"}
		}); err != context.DeadlineExceeded {
			t.Fatalf("Await with transient failures until the deadline = %v, want context.DeadlineExceeded", err)
		}

		inTx := &Core{db: callerTx{}, hub: c.hub}
		deadlock := &pgconn.PgError{Code: "40P01"}
		tries = 0
		if _, err := Await(t.Context(), inTx, func(context.Context) (int, *Refusal, error) {
			tries++
			return 0, nil, deadlock
		}); !errors.Is(err, deadlock) || tries != 1 {
			t.Fatalf("Await in the caller's transaction = %v after %d tries, want the 40P01 after 1", err, tries)
		}
	})
}

// callerTx stands for a caller's pgx.Tx as a Core's database; Await only
// looks at its type.
type callerTx struct{ pgx.Tx }
