package pglease

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/coalesce"
)

// SetWaitingHook makes c call f each time a blocking acquire has been
// refused and is about to wait, with the lease name it waits on. Set it
// before the client is used.
func SetWaitingHook(c *Client, f func(name string)) {
	c.c.OnWait = func(name string, _ error) { f(name) }
}

// SetBatchHooks makes c's acquire coalescing call sending before each call
// or batch is sent (with its size), queued after a call queued (with the
// queue's length), and left after it released a lease granted to a
// caller who had left (with its name). Set them before the client is used.
func SetBatchHooks(c *Client, sending, queued func(n int), left func(name string)) {
	g := &c.batch.acquires
	g.Sending, g.Queued = sending, queued
	orig := g.Left
	g.Left = func(a acquireCall, res coalesce.Result[acquired]) {
		orig(a, res)
		left(a.name)
	}
}

// SetBatchSpill sets how long an acquire in flight holds back the calls
// queued behind it (batchSpill by default). Set it before the client is
// used.
func SetBatchSpill(c *Client, d time.Duration) {
	c.batch.acquires.Spill = d
}

// EndStrandedSession is endStrandedSession for the session with backend
// PID pid and client port port.
func EndStrandedSession(ctx context.Context, database DB, pid uint32, port int) bool {
	return endStrandedSession(ctx, database, session{pid: pid, port: port})
}
