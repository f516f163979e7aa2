package main

import (
	"context"
	"errors"
	"fmt"
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

// benchSupervisorHandover measures trials handovers between two
// supervisors: the leader's workload returns (OnExit Return: it releases and
// Run returns), and the standby, which had already seen the leader, starts
// its workload. Latency runs from the leader's workload returning to the
// standby's workload starting.
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
	lat := make([]time.Duration, trials)
	for i := range trials {
		var err error
		if lat[i], err = supervisorTrial(ctx, pools, fmt.Sprintf("handover/supervisor/%d", i)); err != nil {
			return res, fmt.Errorf("supervisor handover %d: %w", i, err)
		}
	}
	res.Latency = summarize(lat)
	return res, nil
}

// supervisorTrial runs one handover of lease name from a supervisor on
// pools[0] to one on pools[1].
func supervisorTrial(ctx context.Context, pools [2]*pgxpool.Pool, name string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*supervisorTrialTimeout)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	seen := make(chan struct{}, 1)
	leader, err := supervisor.New(pools[0], supervisor.Config{
		Name: name, TTL: supervisorTTL, OnExit: supervisor.Return, Holder: "bench/" + name + "/leader", Logger: quiet,
	})
	if err != nil {
		return 0, err
	}
	standby, err := supervisor.New(pools[1], supervisor.Config{
		Name: name, TTL: supervisorTTL, OnExit: supervisor.Return, Holder: "bench/" + name + "/standby", Logger: quiet,
		Observer: func(ev supervisor.Event) {
			if ev.Kind == supervisor.EventLeaderSeen {
				select {
				case seen <- struct{}{}:
				default:
				}
			}
		},
	})
	if err != nil {
		return 0, err
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
		return 0, err
	}
	go func() {
		runs <- standby.Run(ctx, func(context.Context) error {
			started <- time.Now()
			return nil
		})
	}()
	if _, err := recv(ctx, seen, "the standby to see the leader"); err != nil {
		return 0, err
	}
	close(stop)
	t0, err := recv(ctx, returned, "the leader's workload to return")
	if err != nil {
		return 0, err
	}
	t1, err := recv(ctx, started, "the standby to start its workload")
	if err != nil {
		return 0, err
	}
	return t1.Sub(t0), errors.Join(<-runs, <-runs)
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
