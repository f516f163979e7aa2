package tenure

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/notify"
)

// Refusal is why one try did not grant a tenure.
type Refusal struct {
	// Name is the lease name or scope that refused: the one to wait on.
	Name string
	// RetryIn is when a retry may succeed without a release: the holder's
	// expiry, or a backoff after an error the caller retries.
	RetryIn time.Duration
}

// Await calls try until it grants or fails, waiting between refusals for a
// release NOTIFY of the refusing name or its RetryIn, whichever comes
// first. It listens only once refused (a free lease or slot needs no LISTEN
// connection), and after starting to listen to a name it tries again before
// waiting, so that a release between the refusal and the LISTEN is not
// missed. It returns ctx.Err() unchanged when ctx ends first.
func Await[T any](ctx context.Context, c *Core, try func(ctx context.Context) (T, *Refusal, error)) (T, error) {
	var (
		w         *notify.Waiter
		listening string // the name w waits on
		retried   bool
	)
	defer func() {
		if w != nil {
			w.Close(ctx)
		}
	}()
	for {
		got, ref, err := try(ctx)
		if ref == nil {
			return got, err
		}
		if w == nil || listening != ref.Name {
			if w != nil {
				w.Close(ctx)
			}
			w, listening = c.hub.Listen(ctx, c.kind.Noun, ref.Name), ref.Name
			if !retried {
				retried = true
				continue
			}
		}
		retried = false
		if c.OnWait != nil {
			c.OnWait(ref.Name, err)
		}
		if err := w.Wait(ctx, ref.RetryIn); err != nil {
			var zero T
			return zero, err
		}
	}
}
