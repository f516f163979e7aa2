package pglease

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
)

// DefaultObserveInterval is how often Observe looks at the lease when no
// notification came (Config.ObserveInterval).
const DefaultObserveInterval = 2 * time.Second

// LeaseState is one state of a lease as Observe delivers it.
type LeaseState struct {
	// Name is the lease name.
	Name string
	// Holder is the holder of the live tenure; empty when nobody leads
	// (the lease is free, its tenure expired, or it never existed).
	Holder string
	// Fence is the live tenure's fence; for a vacancy, the last tenure's
	// (0 for a lease that never existed).
	Fence int64
	// Value is the value the holder published (WithValue, SetValue);
	// empty when none or when nobody leads.
	Value string
	// ExpiresIn is how long the live tenure has left unless renewed, as the
	// server computed it when read; zero when nobody leads.
	ExpiresIn time.Duration
	// ReleaseRequested is true when an operator asked the holder to hand
	// over (pgleaseadmin.RequestRelease) and it has not yet.
	ReleaseRequested bool
}

// Vacant reports whether nobody leads: the lease is free or expired.
func (s LeaseState) Vacant() bool { return s.Holder == "" }

// same reports whether s and o are the same state (ExpiresIn aside: a
// renewal is no change).
func (s LeaseState) same(o LeaseState) bool {
	s.ExpiresIn, o.ExpiresIn = 0, 0
	return s == o
}

// Observe watches lease name until ctx ends, and returns a channel of its
// states: the current state first, then each change, in order: a new
// holder (with its fence and value), a new value, a release request, a
// release or an expiry (a vacancy, Vacant). The channel is closed when
// ctx ends.
//
// Observe reads the state with pglease.observe, which registers the lease
// as observed, so that each change of it NOTIFYs the client's LISTEN
// connection (see DB) and is read at once; changes of leases nobody
// observes send nothing. It also reads the state at the live tenure's
// expiry and every Config.ObserveInterval, so that a lost notification
// (no LISTEN connection: a pooler in transaction mode, or one that broke
// in a reconnect or failover) delays a change by at most that interval,
// and reads it at once when its LISTEN connection comes back. A state
// that lasted less than the time between two reads may not be seen; the
// latest one always is. When a read fails (a connection error), Observe
// tries again after ObserveInterval and delivers the state it then reads if it
// differs from the last one delivered. A consumer that lags does not make
// Observe queue states: the next one it gets is the current one.
//
// It returns an error, and no channel, when the first read fails: an
// invalid name (ErrInvalidArgument), a database that lacks 0.3.0's
// pglease.observe (ErrNotMigrated), a role without pglease_client
// (ErrPermissionDenied), a connection error.
func (c *Client) Observe(ctx context.Context, name string) (<-chan LeaseState, error) {
	if err := tenure.CheckText("name", name); err != nil {
		return nil, err
	}
	w := c.c.Listen(ctx, name) // before the first read: no change is missed
	first, err := c.observe(ctx, name)
	if err != nil {
		w.Close(ctx)
		return nil, err
	}
	ch := make(chan LeaseState, 1)
	ch <- first
	go func() {
		defer close(ch)
		defer w.Close(ctx)
		last, failed := first, false
		for {
			wait := c.observeEvery
			if !last.Vacant() && !failed {
				wait = min(wait, last.ExpiresIn)
			}
			if w.Wait(ctx, wait) != nil {
				return
			}
			st, err := c.observe(ctx, name)
			if failed = err != nil; failed {
				if ctx.Err() != nil {
					return
				}
				c.c.Logger().Debug("pglease: Observe could not read the lease; trying again", "name", name, "err", err)
				continue
			}
			if st.same(last) {
				last = st
				continue
			}
			select {
			case ch <- st:
				last = st
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// observe reads the state of lease name and registers it as observed for
// three ObserveIntervals.
func (c *Client) observe(ctx context.Context, name string) (LeaseState, error) {
	row, err := c.c.Queries().LeaseObserve(ctx, db.LeaseObserveParams{Name: name, ForInterval: 3 * c.observeEvery})
	if err != nil {
		return LeaseState{}, c.c.Interpret(ctx, err)
	}
	st := LeaseState{Name: name, Fence: row.Fence, ReleaseRequested: row.ReleaseRequested}
	if row.State == "held" {
		st.Holder, st.Value, st.ExpiresIn = row.Holder, row.Value, row.ExpiresIn
	}
	return st, nil
}
