package supervisor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/pglease/pglease/pglease"
)

// ErrReleaseRequested is the cancellation cause of a workload whose
// supervisor was asked to hand over (pgleaseadmin.RequestRelease,
// `pglease release --request`): unlike a loss, the tenure is still held,
// and is released once the workload has returned.
var ErrReleaseRequested = errors.New("pglease: release requested: handing over")

// onRequest returns workload cancelled with ErrReleaseRequested, and
// *asked set, once a release of the lease tenure t is requested: seen by a
// renewal or, at once, by the tenure's watch (pglease.WatchReleaseRequests,
// with which the supervisor acquires). A slot's workload is returned as
// it is.
func (s *Supervisor) onRequest(t held, workload func(context.Context) error, asked *atomic.Bool) func(context.Context) error {
	l, ok := t.(*pglease.Lease)
	if !ok {
		return workload
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() {
			stop()
			wg.Wait()
		}()
		e := s.event(EventReleaseRequested, ErrReleaseRequested)
		wg.Go(func() {
			select {
			case <-wctx.Done():
				return
			case <-l.ReleaseRequested():
			}
			asked.Store(true)
			s.log.Info("release requested; stopping the workload to hand over", "fence", l.Fence())
			s.cfg.observe(e)
			cancel(ErrReleaseRequested)
		})
		return workload(ctx)
	}
}
