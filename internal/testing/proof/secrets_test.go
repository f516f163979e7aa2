//go:build proof

package proof

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/pgleasemigrate"
	"github.com/pglease/pglease/runslots"
	"github.com/pglease/pglease/supervisor"
)

// secret is the password of every connection string below; it must appear
// in no error and no log line.
const secret = "s3cr3t-Pw-9q"

// TestNoPasswordLeaks points every entry point of the Go packages at
// servers that cannot be reached (127.0.0.1:1) or connection strings that
// cannot be parsed, with a password in the URL's user information, in its
// query, or in a keyword/value string, and checks every error string and
// every log line the supervisor and Slot.Run write.
func TestNoPasswordLeaks(t *testing.T) {
	conns := map[string]string{
		"url userinfo":    "postgres://proof:" + secret + "@127.0.0.1:1/proof?sslmode=disable&connect_timeout=1",
		"url query":       "postgres://proof@127.0.0.1:1/proof?sslmode=disable&connect_timeout=1&password=" + secret,
		"keyword/value":   "host=127.0.0.1 port=1 user=proof dbname=proof sslmode=disable connect_timeout=1 password=" + secret,
		"unparsable url":  "postgres://proof:" + secret + "@127.0.0.1:notaport/proof",
		"unparsable dsn":  "host=127.0.0.1 port=1 password=" + secret + " user='unterminated",
		"unknown setting": "postgres://proof:" + secret + "@127.0.0.1:1/proof?sslmode=bogus",
	}
	var (
		checkedMu sync.Mutex
		checked   int
	)
	for name, conn := range conns {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var errs []string
			note := func(what string, err error) {
				if err == nil {
					t.Errorf("%s succeeded, want an error", what)
					return
				}
				errs = append(errs, fmt.Sprintf("%s: %v", what, err), fmt.Sprintf("%s: %+v", what, err), fmt.Sprintf("%s: %#v", what, err.Error()))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			note("pgleasemigrate.Up", pgleasemigrate.Up(ctx, conn))
			note("pgleasemigrate.Down", pgleasemigrate.Down(ctx, conn))
			var logs bytes.Buffer
			var logMu sync.Mutex
			logger := slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
			pool, err := pgxpool.New(ctx, conn)
			if err != nil {
				note("pgxpool.New", err)
			} else {
				defer pool.Close()
				c, err := pglease.New(pool, pglease.Config{})
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.TryAcquire(ctx, "l", time.Second)
				note("TryAcquire", err)
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = c.Acquire(actx, "l", time.Second)
				acancel()
				note("Acquire", err)
				note("WithFence", pglease.WithFence(ctx, pool, "l", 1, func(pgx.Tx) error { return nil }))
				_, err = pgleaseadmin.Leases(ctx, pool)
				note("Leases", err)
				_, _, err = pgleaseadmin.ForceRelease(ctx, pool, "l")
				note("ForceRelease", err)
				sc, err := runslots.New(pool, runslots.Config{Logger: logger})
				if err != nil {
					t.Fatal(err)
				}
				_, err = sc.TryClaim(ctx, runslots.Want{Scope: "s", Capacity: 2}, time.Second)
				note("TryClaim", err)
				_, err = sc.TryClaimAll(ctx, []runslots.Want{{Scope: "s", Capacity: 2}}, time.Second)
				note("TryClaimAll", err)
				_, err = pgleaseadmin.Slots(ctx, pool)
				note("Slots", err)
				rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
				note("Claim", func() error {
					s, err := sc.Claim(rctx, runslots.Want{Scope: "s", Capacity: 2}, time.Second)
					if err != nil {
						return err
					}
					return s.Run(rctx, func(context.Context) error { return nil })
				}())
				rcancel()
				sup, err := supervisor.NewLease(pool, "l", supervisor.Config{TTL: time.Second, Logger: logger})
				if err != nil {
					t.Fatal(err)
				}
				sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
				err = sup.Run(sctx, func(context.Context) error { return nil })
				scancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("supervisor Run = %v, want context.DeadlineExceeded", err)
				}
			}
			logMu.Lock()
			lines := strings.FieldsFunc(logs.String(), func(r rune) bool { return r == '\n' })
			logMu.Unlock()
			checkedMu.Lock()
			checked += len(errs) + len(lines)
			checkedMu.Unlock()
			for _, s := range append(errs, lines...) {
				if strings.Contains(s, secret) {
					t.Errorf("password leaked: %s", s)
				}
			}
			t.Logf("%d error strings and %d log lines checked; e.g. %s", len(errs), len(lines), firstOr(errs))
		})
	}
	t.Cleanup(func() { t.Logf("%d strings checked over %d connection strings", checked, len(conns)) })
}

func firstOr(ss []string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	return ss[0]
}

// lockedWriter serialises writes to a buffer.
type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
