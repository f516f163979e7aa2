// Package coalesce sends concurrent calls together (group commit): an idle
// Group makes a call at once, on its caller's goroutine and context, with
// no added latency; calls made while one is in flight queue, and go out
// together in one batched call as soon as it returns, then the calls that
// queued meanwhile, and so on until the queue is empty.
//
// # Safety
//
// A batch runs on a context of its own, detached from its callers' and
// cancelled only once every caller in it has left: one caller's
// cancellation never cancels the others'. A caller whose context ends
// while its call is queued or in flight returns ctx.Err() at once; when
// the batch's result for it comes later, the Group hands it to Left
// instead (pglease releases a lease granted to a caller who left), so
// nothing is held that no caller knows about. A caller that left before
// its batch was sent is not sent.
package coalesce

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Result is one call's outcome in a batch.
type Result[Res any] struct {
	Res Res
	Err error
}

// Group coalesces concurrent calls of one kind. Its zero value is not
// usable: set One, Many and Max.
type Group[Req, Res any] struct {
	// One makes a single call, on its caller's goroutine and context: the
	// idle path.
	One func(ctx context.Context, req Req) (Res, error)
	// Many makes the calls reqs in one round trip and returns their
	// results, one per request in order. It runs on a goroutine of the
	// Group, on a context cancelled once every caller in the batch left.
	Many func(ctx context.Context, reqs []Req) []Result[Res]
	// Left, when set, receives the result of a call whose caller left
	// (its context ended) before it came, on the Group's goroutine, after
	// the batch's other callers got theirs.
	Left func(req Req, res Result[Res])
	// Max is the most calls one batch carries; the rest go in the next.
	Max int
	// InFlight is how many calls or batches may be in flight at once:
	// a call made while fewer are goes at once, through One; otherwise it
	// queues. Defaults to 1 (group commit: one round trip at a time).
	InFlight int
	// Spill, when positive, is how long a call or batch holds its place
	// in flight: one still out after Spill (waiting on the server, say,
	// for a row lock) stops counting against InFlight, so that the calls
	// queued behind it go out without it. It still delivers its results
	// when it returns.
	Spill time.Duration

	// Queued, when set, is called after a call queued, with the number of
	// calls queued then (tests wait on it).
	Queued func(n int)
	// Sending, when set, is called before a call (size 1, through One) or
	// a batch is sent, with its size (tests wait on it).
	Sending func(n int)

	mu     sync.Mutex
	flying int // calls and batches in flight that hold their place
	queue  []*call[Req, Res]
}

// flight is one call or batch in flight.
type flight struct {
	timer *time.Timer // Spill's, when set
	gone  bool        // it no longer holds its place: landed or spilled (g.mu)
}

// The states of a queued call.
const (
	waiting   = iota
	delivered // its result is set: its caller takes it
	left      // its caller returned ctx.Err(): Left takes the result
)

// call is one queued call.
type call[Req, Res any] struct {
	ctx   context.Context
	req   Req
	done  chan struct{} // closed once delivered
	res   Result[Res]
	state atomic.Int32
}

// Do makes the call req: at once through One when nothing is in flight,
// else in the next batch. It returns ctx.Err() when ctx ends before the
// result came (see the package doc for what happens to that result).
func (g *Group[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	g.mu.Lock()
	if g.flying < max(g.InFlight, 1) {
		f := g.flyLocked()
		g.mu.Unlock()
		if g.Sending != nil {
			g.Sending(1)
		}
		res, err := g.One(ctx, req)
		g.land(f)
		return res, err
	}
	c := &call[Req, Res]{ctx: ctx, req: req, done: make(chan struct{})}
	g.queue = append(g.queue, c)
	n := len(g.queue)
	g.mu.Unlock()
	if g.Queued != nil {
		g.Queued(n)
	}
	select {
	case <-c.done:
		return c.res.Res, c.res.Err
	case <-ctx.Done():
		if c.state.CompareAndSwap(waiting, left) {
			var zero Res
			return zero, ctx.Err()
		}
		<-c.done // delivered meanwhile: the caller has its result
		return c.res.Res, c.res.Err
	}
}

// flyLocked takes a place in flight for a call or batch about to go out.
// g.mu is held.
func (g *Group[Req, Res]) flyLocked() *flight {
	g.flying++
	f := &flight{}
	if g.Spill > 0 {
		f.timer = time.AfterFunc(g.Spill, func() { g.leave(f) })
	}
	return f
}

// land ends f, which returned.
func (g *Group[Req, Res]) land(f *flight) {
	if f.timer != nil {
		f.timer.Stop()
	}
	g.leave(f)
}

// leave gives up f's place in flight, once (it landed, or it spilled:
// still out after Spill), and sends what queued, while places are free.
func (g *Group[Req, Res]) leave(f *flight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.gone {
		return
	}
	f.gone = true
	g.flying--
	for len(g.queue) > 0 && g.flying < max(g.InFlight, 1) {
		batch := g.takeLocked()
		next := g.flyLocked()
		go func() {
			g.send(batch)
			g.land(next)
		}()
	}
}

// takeLocked takes up to Max calls off the queue. g.mu is held.
func (g *Group[Req, Res]) takeLocked() []*call[Req, Res] {
	n := min(len(g.queue), max(g.Max, 1))
	batch := g.queue[:n:n]
	g.queue = append([]*call[Req, Res](nil), g.queue[n:]...)
	return batch
}

// send makes one batched call of the calls of batch whose callers are
// still there, and delivers its results.
func (g *Group[Req, Res]) send(batch []*call[Req, Res]) {
	live := make([]*call[Req, Res], 0, len(batch))
	for _, c := range batch {
		if c.state.Load() == waiting {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	// The batch's context ends once every caller in it has left.
	ctx, cancel := context.WithCancel(context.WithoutCancel(live[0].ctx))
	defer cancel()
	var there atomic.Int64
	there.Store(int64(len(live)))
	stops := make([]func() bool, len(live))
	reqs := make([]Req, len(live))
	for i, c := range live {
		reqs[i] = c.req
		stops[i] = context.AfterFunc(c.ctx, func() {
			if there.Add(-1) == 0 {
				cancel()
			}
		})
	}
	if g.Sending != nil {
		g.Sending(len(live))
	}
	results := g.Many(ctx, reqs)
	for _, stop := range stops {
		stop()
	}
	var orphans []int
	for i, c := range live {
		c.res = results[i]
		if c.state.CompareAndSwap(waiting, delivered) {
			close(c.done)
		} else {
			orphans = append(orphans, i)
		}
	}
	if g.Left != nil {
		for _, i := range orphans {
			g.Left(live[i].req, results[i])
		}
	}
}
