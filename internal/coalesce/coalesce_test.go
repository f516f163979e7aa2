package coalesce

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/pglease/pglease/internal/testing/testsignal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a Group whose calls block until the test lets them go.
type fake struct {
	g       Group[int, int]
	release chan struct{} // one receive lets one call (or batch) return
	batches testsignal.Signal[[]int]
	queued  testsignal.Signal[int]
	left    testsignal.Signal[[2]int] // req, res
	ctxs    chan context.Context      // the batches' contexts
}

func newFake() *fake {
	f := &fake{release: make(chan struct{}), batches: testsignal.New[[]int](),
		queued: testsignal.New[int](), left: testsignal.New[[2]int](), ctxs: make(chan context.Context, 16)}
	f.g = Group[int, int]{
		One: func(ctx context.Context, req int) (int, error) {
			f.batches.Send([]int{req})
			select {
			case <-f.release:
				return req * 10, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		},
		Many: func(ctx context.Context, reqs []int) []Result[int] {
			f.ctxs <- ctx
			f.batches.Send(slices.Clone(reqs))
			<-f.release
			out := make([]Result[int], len(reqs))
			for i, r := range reqs {
				out[i] = Result[int]{Res: r * 10}
			}
			return out
		},
		Left:   func(req int, res Result[int]) { f.left.Send([2]int{req, res.Res}) },
		Max:    3,
		Queued: func(n int) { f.queued.Send(n) },
	}
	return f
}

type outcome struct {
	req, res int
	err      error
}

func (f *fake) do(ctx context.Context, req int, out chan<- outcome) {
	go func() {
		res, err := f.g.Do(ctx, req)
		out <- outcome{req, res, err}
	}()
}

// An idle group calls One at once; calls made meanwhile go out together
// in one batch when it returns, at most Max at a time, in queue order.
func TestCoalesce(t *testing.T) {
	f := newFake()
	out := make(chan outcome, 8)
	ctx := t.Context()
	f.do(ctx, 1, out)
	if got := f.batches.Await(t, "the first call"); !slices.Equal(got, []int{1}) {
		t.Fatalf("first call: got %v, want [1] through One", got)
	}
	for i := 2; i <= 5; i++ {
		f.do(ctx, i, out)
		if n := f.queued.Await(t, "a queued call"); n != i-1 {
			t.Fatalf("queue length: got %d, want %d", n, i-1)
		}
	}
	f.release <- struct{}{}
	if o := <-out; o.req != 1 || o.res != 10 || o.err != nil {
		t.Fatalf("first call: got %+v, want 1 -> 10", o)
	}
	if got := f.batches.Await(t, "the first batch"); !slices.Equal(got, []int{2, 3, 4}) {
		t.Fatalf("first batch: got %v, want [2 3 4] (Max 3, queue order)", got)
	}
	f.release <- struct{}{}
	if got := f.batches.Await(t, "the second batch"); !slices.Equal(got, []int{5}) {
		t.Fatalf("second batch: got %v, want [5]", got)
	}
	f.release <- struct{}{}
	for range 4 {
		if o := <-out; o.res != o.req*10 || o.err != nil {
			t.Fatalf("got %+v, want res = req*10", o)
		}
	}
	// Idle again: the next call goes through One.
	f.do(ctx, 6, out)
	if got := f.batches.Await(t, "a call on an idle group"); !slices.Equal(got, []int{6}) {
		t.Fatalf("idle call: got %v, want [6]", got)
	}
	f.release <- struct{}{}
	<-out
}

// A caller whose context ends while queued returns ctx.Err() at once and
// is not sent; one who leaves while its batch is in flight returns
// ctx.Err(), its result goes to Left, and the batch goes on for the others.
func TestCoalesceLeft(t *testing.T) {
	f := newFake()
	out := make(chan outcome, 8)
	f.do(t.Context(), 1, out)
	f.batches.Await(t, "the first call")
	early, cancelEarly := context.WithCancel(t.Context())
	f.do(early, 2, out)
	f.queued.Await(t, "call 2 queued")
	cancelEarly()
	if o := <-out; o.req != 2 || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("call 2, cancelled while queued: got %+v, want context.Canceled", o)
	}
	late, cancelLate := context.WithCancel(t.Context())
	f.do(late, 3, out)
	f.queued.Await(t, "call 3 queued")
	f.do(t.Context(), 4, out)
	f.queued.Await(t, "call 4 queued")
	f.release <- struct{}{}
	<-out // call 1
	if got := f.batches.Await(t, "the batch"); !slices.Equal(got, []int{3, 4}) {
		t.Fatalf("batch: got %v, want [3 4] (call 2 left before it was sent)", got)
	}
	batchCtx := <-f.ctxs
	cancelLate()
	if o := <-out; o.req != 3 || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("call 3, cancelled in flight: got %+v, want context.Canceled", o)
	}
	if batchCtx.Err() != nil {
		t.Fatalf("the batch's context ended with one caller of two gone: %v", batchCtx.Err())
	}
	f.release <- struct{}{}
	if o := <-out; o.req != 4 || o.res != 40 || o.err != nil {
		t.Fatalf("call 4: got %+v, want 4 -> 40", o)
	}
	if got := f.left.Await(t, "Left with call 3's result"); got != [2]int{3, 30} {
		t.Fatalf("Left: got %v, want [3 30]", got)
	}
}

// A batch's context ends once every caller in it has left.
func TestCoalesceAllLeft(t *testing.T) {
	f := newFake()
	out := make(chan outcome, 8)
	f.do(t.Context(), 1, out)
	f.batches.Await(t, "the first call")
	ctx, cancel := context.WithCancel(t.Context())
	f.do(ctx, 2, out)
	f.queued.Await(t, "call 2 queued")
	f.do(ctx, 3, out)
	f.queued.Await(t, "call 3 queued")
	f.release <- struct{}{}
	<-out
	f.batches.Await(t, "the batch")
	batchCtx := <-f.ctxs
	cancel()
	<-out
	<-out
	select {
	case <-batchCtx.Done():
	case <-time.After(testsignal.Timeout):
		t.Fatalf("the batch's context did not end %s after every caller in it left", testsignal.Timeout)
	}
	f.release <- struct{}{}
	f.left.Await(t, "Left")
	f.left.Await(t, "Left")
}

// A call still in flight after Spill stops holding back the calls queued
// behind it: they go out without it, and it still delivers its result
// when it returns.
func TestCoalesceSpill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.g.Spill = 20 * time.Millisecond
		out := make(chan outcome, 8)
		f.do(t.Context(), 1, out)
		f.batches.Await(t, "the first call")
		f.do(t.Context(), 2, out)
		f.queued.Await(t, "call 2 queued")
		f.do(t.Context(), 3, out)
		f.queued.Await(t, "call 3 queued")
		start := time.Now()
		if got := f.batches.Await(t, "the batch behind the stuck call"); !slices.Equal(got, []int{2, 3}) {
			t.Fatalf("batch: got %v, want [2 3]", got)
		}
		if waited := time.Since(start); waited != 20*time.Millisecond {
			t.Fatalf("the queued calls went out after %v, want Spill (20ms)", waited)
		}
		// Call 1 spilled and the batch holds the one place in flight: a
		// new call queues (and leaves: it would race call 1 for a release).
		ctx4, cancel4 := context.WithCancel(t.Context())
		f.do(ctx4, 4, out)
		if n := f.queued.Await(t, "call 4 queued"); n != 1 {
			t.Fatalf("queue length: got %d, want 1", n)
		}
		cancel4()
		if o := <-out; o.req != 4 || !errors.Is(o.err, context.Canceled) {
			t.Fatalf("call 4: got %+v, want context.Canceled", o)
		}
		f.release <- struct{}{} // one of call 1 and the batch returns
		f.release <- struct{}{} // the other
		got := map[int]int{}
		for range 3 {
			o := <-out
			if o.err != nil {
				t.Fatalf("call %d: %v", o.req, o.err)
			}
			got[o.req] = o.res
		}
		if want := map[int]int{1: 10, 2: 20, 3: 30}; !maps.Equal(got, want) {
			t.Fatalf("results: got %v, want %v", got, want)
		}
		// Landed calls do not spill: idle again, with its one place free.
		f.do(t.Context(), 5, out)
		if b := f.batches.Await(t, "call 5"); !slices.Equal(b, []int{5}) {
			t.Fatalf("call 5: got %v, want [5] through One", b)
		}
		f.release <- struct{}{}
		<-out
	})
}
