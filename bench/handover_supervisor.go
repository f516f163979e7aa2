package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/supervisor"
)

// supervisorTTL is the supervisors' lease TTL in the handover trials; the
// handover is a release, so it only has to outlast a trial.
const supervisorTTL = 10 * time.Second

// supervisorTrialTimeout bounds each step of a supervisor handover trial.
const supervisorTrialTimeout = 10 * time.Second

// supervisorSlow is a handover slow enough to log on its own, by part: a
// standby that waited for the leader's expiry, say, rather than being woken
// by the release's NOTIFY.
const supervisorSlow = time.Second

// benchSupervisorHandover measures trials handovers between two
// supervisors: the leader's workload returns (OnExit Return: it releases and
// Run returns), and the standby, which had already seen the leader, starts
// its workload. Latency runs from the leader's workload returning to the
// standby's workload starting; Parts splits it at the leader's
// EventReleased and the standby's EventAcquired.
func (e *env) benchSupervisorHandover(ctx context.Context, trials int) (HandoverResult, error) {
	res := HandoverResult{Kind: "release", Level: "supervisor", Trials: trials, TTLMs: ms(supervisorTTL)}
	var pools [2]*pgxpool.Pool
	for i := range pools {
		cfg, err := pgxpool.ParseConfig(e.url)
		if err != nil {
			return res, err
		}
		cfg.MaxConns = 3 // LISTEN, acquire or renew, release
		if pools[i], err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return res, err
		}
		defer pools[i].Close()
	}
	var lat, release, acquire, start []time.Duration
	for i := range trials {
		h, err := supervisorTrial(ctx, pools, fmt.Sprintf("handover/supervisor/%d", i))
		if err != nil {
			return res, fmt.Errorf("supervisor handover %d: %w", i, err)
		}
		total, rel, acq, st := h.started.Sub(h.returned), h.released.Sub(h.returned), h.acquired.Sub(h.released), h.started.Sub(h.acquired)
		lat, release, acquire, start = append(lat, total), append(release, rel), append(acquire, acq), append(start, st)
		if total > supervisorSlow {
			log.Printf("supervisor handover %d took %s: release %s, acquire %s, start %s", i, total, rel, acq, st)
		}
	}
	res.Latency = summarize(lat)
	res.Parts = map[string]Latency{"release": summarize(release), "acquire": summarize(acquire), "start": summarize(start)}
	return res, nil
}

// supervisorHandover is when each step of one supervisor handover was
// seen: the leader's workload returning, the leader's EventReleased, the
// standby's EventAcquired and the standby's workload starting.
type supervisorHandover struct {
	returned, released, acquired, started time.Time
}

// at returns an Observer that sends the time of the first event of kind
// to ch (of capacity 1) and passes every event to next, if any.
func at(kind supervisor.EventKind, ch chan<- time.Time, next func(supervisor.Event)) func(supervisor.Event) {
	return func(ev supervisor.Event) {
		if ev.Kind == kind {
			select {
			case ch <- time.Now():
			default:
			}
		}
		if next != nil {
			next(ev)
		}
	}
}

// supervisorTrial runs one handover of lease name from a supervisor on
// pools[0] to one on pools[1].
func supervisorTrial(ctx context.Context, pools [2]*pgxpool.Pool, name string) (supervisorHandover, error) {
	var h supervisorHandover
	ctx, cancel := context.WithTimeout(ctx, 3*supervisorTrialTimeout)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	seen, released, acquired := make(chan time.Time, 1), make(chan time.Time, 1), make(chan time.Time, 1)
	leader, err := supervisor.NewLease(pools[0], name, supervisor.Config{
		TTL: supervisorTTL, OnExit: supervisor.Return, Holder: "bench/" + name + "/leader", Logger: quiet,
		Observer: at(supervisor.EventReleased, released, nil),
	})
	if err != nil {
		return h, err
	}
	standby, err := supervisor.NewLease(pools[1], name, supervisor.Config{
		TTL: supervisorTTL, OnExit: supervisor.Return, Holder: "bench/" + name + "/standby", Logger: quiet,
		Observer: at(supervisor.EventLeaderSeen, seen, at(supervisor.EventAcquired, acquired, nil)),
	})
	if err != nil {
		return h, err
	}

	leading, stop := make(chan struct{}), make(chan struct{})
	returned, started := make(chan time.Time, 1), make(chan time.Time, 1)
	runs := make(chan error, 2)
	go func() {
		runs <- leader.Run(ctx, func(ctx context.Context) error {
			close(leading)
			select {
			case <-stop:
				returned <- time.Now()
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	if _, err := recv(ctx, leading, "the leader to start its workload"); err != nil {
		return h, err
	}
	go func() {
		runs <- standby.Run(ctx, func(context.Context) error {
			started <- time.Now()
			return nil
		})
	}()
	if _, err := recv(ctx, seen, "the standby to see the leader"); err != nil {
		return h, err
	}
	close(stop)
	for _, s := range []struct {
		t    *time.Time
		ch   <-chan time.Time
		what string
	}{
		{&h.returned, returned, "the leader's workload to return"},
		{&h.released, released, "the leader's EventReleased"},
		{&h.acquired, acquired, "the standby's EventAcquired"},
		{&h.started, started, "the standby to start its workload"},
	} {
		if *s.t, err = recv(ctx, s.ch, s.what); err != nil {
			return h, err
		}
	}
	return h, errors.Join(<-runs, <-runs)
}

// recv receives from ch, waiting at most supervisorTrialTimeout.
func recv[T any](ctx context.Context, ch <-chan T, what string) (T, error) {
	var zero T
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-time.After(supervisorTrialTimeout):
		return zero, fmt.Errorf("timed out waiting for %s", what)
	}
}
