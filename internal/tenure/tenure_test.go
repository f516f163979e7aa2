package tenure

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// noDB fails every query: the timer logic under test makes none.
type noDB struct{}

var errNoDB = errors.New("noDB: no query expected")

func (noDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNoDB
}
func (noDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNoDB }
func (noDB) QueryRow(context.Context, string, ...any) pgx.Row        { return errRow{} }

type errRow struct{}

func (errRow) Scan(...any) error { return errNoDB }

// TestDoneAtDeadline: Done closes exactly at the local deadline, the
// request's send time plus the TTL minus the safety margin (a tenth of the
// TTL by default), on the bubble's fake clock.
func TestDoneAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(noDB{}, Kind{Noun: "lease", Prefix: "pglease", Lost: ErrLeaseLost}, Config{})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		tn := c.Grant("x", 0, 1, time.Second, start)
		if want := start.Add(900 * time.Millisecond); !tn.Deadline().Equal(want) {
			t.Fatalf("Deadline %s after the send, want 900ms", tn.Deadline().Sub(start))
		}
		<-tn.Done()
		if got := time.Since(start); got != 900*time.Millisecond {
			t.Fatalf("Done closed %s after the send, want at the deadline (900ms)", got)
		}
	})
}

// TestConfigRefused: New refuses invalid settings, naming the field.
func TestConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Holder: "a\x00b"}, "Holder must not contain NUL"},
		{Config{SafetyMargin: -1}, "SafetyMargin must not be negative"},
		{Config{RenewInterval: time.Second, RetryDelay: 2 * time.Second}, "RetryDelay 2s must be shorter than RenewInterval 1s"},
	} {
		_, err := New(noDB{}, Kind{}, tc.cfg)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument saying %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(nil, Kind{}, Config{}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("New(nil) = %v, want ErrInvalidArgument", err)
	}
}
