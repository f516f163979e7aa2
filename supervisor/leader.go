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
// renewal (Lease.ReleaseRequested) or, at once, by observing the lease
// while it runs. A slot's workload is returned as it is.
func (s *Supervisor) onRequest(t held, workload func(context.Context) error, asked *atomic.Bool) func(context.Context) error {
	l, ok := t.(*pglease.Lease)
	if !ok || s.client == nil {
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
		// The observation starts beside the workload, not before it: the
		// workload starts at once (Observe is a round trip and a commit).
		// A request made before the observation is registered is in the
		// state Observe reads first, or in the next renewal's reply.
		wg.Go(func() {
			states, err := s.client.Observe(wctx, s.name)
			if states != nil {
				defer func() {
					for range states { // closed once Observe let go of its LISTEN connection
					}
				}()
			}
			switch {
			case err == nil || wctx.Err() != nil:
			case errors.Is(err, pglease.ErrNotMigrated): // a schema before 0.3.0: nothing to request
				s.log.Debug("cannot observe the lease before schema 0.3.0", "err", err)
			default:
				s.log.Warn("cannot observe the lease; a release request is seen at the next renewal", "err", err)
			}
			for {
				select {
				case <-wctx.Done():
					return
				case <-l.ReleaseRequested():
				case st, ok := <-states: // nil, blocking, when Observe failed
					if !ok {
						return
					}
					if st.Fence != l.Fence() || !st.ReleaseRequested {
						continue
					}
				}
				asked.Store(true)
				s.log.Info("release requested; stopping the workload to hand over", "fence", l.Fence())
				s.cfg.observe(e)
				cancel(ErrReleaseRequested)
				return
			}
		})
		return workload(ctx)
	}
}
