package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/pglease/pglease/pglease"
)

// working is the workload running now, for Healthy: the tenure it runs
// under, and when and why its context was cancelled because that tenure
// ended (zero and nil before).
type working struct {
	t      held
	lostAt time.Time
	cause  error
}

// Healthy returns nil unless the supervisor's workload still runs although
// the tenure it runs under ended more than grace ago: its local deadline
// passed with no renewal confirmed, or the tenure was lost (a renewal
// refused). The supervisor cancelled the workload then; one that has not
// returned may be running alongside the next holder, and only restarting
// the process stops it. That is the case client-go's HealthzAdaptor
// watches for. A supervisor standing by, leading with its renewals on
// time, or winding its workload down on shutdown (the lease is renewed
// meanwhile) is healthy. grace below zero counts as zero; StopTimeout, or
// HardStop when set, are the natural choices. The error is one line that
// names the lease (or scope), the fence and the cause. Healthy is safe to
// call from any goroutine (a health endpoint: see HealthHandler).
func (s *Supervisor) Healthy(grace time.Duration) error {
	s.hmu.Lock()
	w := s.work
	var lostAt time.Time
	var cause error
	if w != nil {
		lostAt, cause = w.lostAt, w.cause
	}
	s.hmu.Unlock()
	if w == nil {
		return nil
	}
	ended, why := w.t.Deadline(), "its local deadline passed with no renewal confirmed"
	if !lostAt.IsZero() && lostAt.Before(ended) {
		ended, why = lostAt, cause.Error()
	}
	late := time.Since(ended)
	if late <= max(grace, 0) {
		return nil
	}
	msg := fmt.Sprintf("supervisor: the workload of %s %q (fence %d) has not returned %s after its tenure ended: %s",
		s.kind, s.name, w.t.Fence(), late.Round(time.Millisecond), why)
	return errors.New(strings.ReplaceAll(msg, "\n", " "))
}

// HealthHandler returns an http.Handler for a liveness endpoint: it
// answers 200 with "ok" while Healthy(grace) returns nil, and 503 Service
// Unavailable with Healthy's error otherwise, as one line of plain text.
func (s *Supervisor) HealthHandler(grace time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := s.Healthy(grace); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// watch returns workload, marked as running under t for Healthy while it
// runs.
func (s *Supervisor) watch(t held, workload func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		w := &working{t: t}
		s.setWork(w)
		defer s.setWork(nil)
		stop := context.AfterFunc(ctx, func() {
			if cause := context.Cause(ctx); tenureEnded(cause) {
				s.hmu.Lock()
				w.lostAt, w.cause = time.Now(), cause
				s.hmu.Unlock()
			}
		})
		defer stop()
		return workload(ctx)
	}
}

// setWork sets the workload running now, nil when none.
func (s *Supervisor) setWork(w *working) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.work = w
}

// tenureEnded reports whether cause, a workload context's cause, says the
// tenure ended (it was lost, or its deadline passed), not a shutdown.
// runslots.ErrSlotLost matches pglease.ErrLeaseLost too.
func tenureEnded(cause error) bool { return errors.Is(cause, pglease.ErrLeaseLost) }
