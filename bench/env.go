package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// env is what workloads are set up against: a scratch database and, while
// a group runs, a pool of connections to it that every workload of the
// group draws from. Connecting is slow next to the ops measured (a second
// for 32 connections on a small machine), so connections outlive the
// workloads, and their prepared statements with them.
type env struct {
	url  string
	pool *pgxpool.Pool
}

// withPool runs f while e has a pool of size connections.
func (e *env) withPool(ctx context.Context, size int, f func() error) error {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(size)
	if e.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	defer func() {
		e.pool.Close()
		e.pool = nil
	}()
	return f()
}

// perConn sets up an instance in which client i runs the cycle that mk
// returns for it on a pool connection of its own.
func (e *env) perConn(ctx context.Context, n int, mk func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error)) (*instance, error) {
	conns := make([]*pgxpool.Conn, n)
	inst := &instance{cycles: make([][]step, n), close: func() {
		for _, c := range conns {
			if c != nil {
				c.Release()
			}
		}
	}}
	err := parallel(n, func(i int) error {
		c, err := e.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns[i] = c
		inst.cycles[i], err = mk(ctx, i, c.Conn())
		return err
	})
	if err != nil {
		inst.close()
		return nil, err
	}
	return inst, nil
}

// parallel runs f for clients 0 to n-1 concurrently and returns their
// errors.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := f(i); err != nil {
				errs[i] = fmt.Errorf("client %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// exec runs sql once on a connection of its own.
func (e *env) exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, sql, args...)
	return errors.Join(err, conn.Close(ctx))
}
