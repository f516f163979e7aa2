package tenure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/asyncrelease"
	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/notify"
)

// Tenure is one tenure of a lease, or of one slot of a scope, identified
// by its fence. It is safe for concurrent use.
type Tenure struct {
	c      *Core
	name   string // lease name or slot scope
	slot   int    // slot number; 0 for a lease
	fence  int64
	ttl    time.Duration
	margin time.Duration
	k      *Keeper // non-nil when a Keeper renews the tenure
	reg    uint64  // k's rounds sent before t was registered
	a      *attrs  // the options of its measurements

	// holdAtLeast, when positive, keeps a lease held on the server until
	// that long after its grant at its release (pglease.WithHoldAtLeast);
	// set before the tenure is handed out.
	holdAtLeast time.Duration

	mu        sync.Mutex
	deadline  time.Time   // monotonic; see Deadline
	over      *time.Timer // closes done at the deadline
	done      chan struct{}
	ended     bool      // done is closed
	abandoned bool      // ended locally while the server may still hold it
	err       error     // why a Keeper ended it
	seen      time.Time // the deadline the last kept Renew returned with
	renewing  int       // own renewals in flight
	failed    bool      // the last own renewal's outcome is unknown

	asked     chan struct{} // closed once a release was requested (leases)
	askedOnce sync.Once
	watchers  sync.WaitGroup // WatchAsked's goroutine
}

// Grant returns the tenure granted by a request sent at sent: its deadline
// is sent + ttl - the safety margin. When the core uses a Keeper, the
// tenure is registered with it.
func (c *Core) Grant(name string, slot int, fence int64, ttl time.Duration, sent time.Time) *Tenure {
	t := &Tenure{c: c, name: name, slot: slot, fence: fence, ttl: ttl, margin: c.cfg.Margin(ttl), k: c.cfg.Keeper, done: make(chan struct{}), asked: make(chan struct{})}
	t.a = c.m.attrsOf(name)
	c.m.acquisitions.Add(context.Background(), 1, t.a.base.Add...)
	c.m.held.Add(context.Background(), 1, t.a.base.Add...)
	t.deadline = sent.Add(ttl - t.margin)
	t.seen = t.deadline
	t.mu.Lock() // expire may run before t.over is set
	t.over = time.AfterFunc(time.Until(t.deadline), t.expire)
	t.mu.Unlock()
	if t.k != nil {
		t.k.register(t)
	}
	return t
}

// HoldAtLeast makes the release of lease tenure t leave it held on the
// server until d after its grant (pglease.release_after). Call it before
// t is handed out.
func (t *Tenure) HoldAtLeast(d time.Duration) { t.holdAtLeast = d }

// Asked returns a channel that is closed once a release of the tenure was
// requested (pglease.request_release): seen by a renewal, or told by Ask.
func (t *Tenure) Asked() <-chan struct{} { return t.asked }

// Ask closes Asked's channel, once.
func (t *Tenure) Ask() { t.askedOnce.Do(func() { close(t.asked) }) }

// WatchAsked closes Asked as soon as a release of this lease tenure is
// requested, instead of at its next renewal, and closes w when the tenure
// ends or Asked is closed. w listened for notifications of the lease from
// before the grant (pglease.request_release always sends one), so that no
// request can come between the grant and the listening unnoticed. At each
// notification, and after listening anew (one may have been missed), it
// reads whether a release was requested (a read: no renewal, no commit to
// wait for). A tenure kept by a Keeper, whose rounds do not report
// requests, reads so every third of its TTL instead while the client
// cannot listen (through a pooler); other tenures then learn it at their
// own renewals.
func (t *Tenure) WatchAsked(w *notify.Waiter) {
	t.watchers.Go(func() { t.watchAsked(w) })
}

// unwatched waits for WatchAsked's goroutine once the tenure has ended
// (it returns promptly then), so that its LISTEN subscription is gone
// when Release or Run returns: a caller may close the idle connection.
func (t *Tenure) unwatched() {
	select {
	case <-t.done:
		t.watchers.Wait()
	default:
	}
}

func (t *Tenure) watchAsked(w *notify.Waiter) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer w.Close(ctx)
	go func() {
		select {
		case <-t.done:
		case <-t.asked:
		case <-ctx.Done():
		}
		cancel()
	}()
	for {
		listens := t.c.hub.Listens()
		poll := t.k != nil && !listens
		if !listens && !poll {
			return
		}
		d := t.ttl
		if poll {
			d = t.ttl / 3
		}
		notified, err := w.WaitNotified(ctx, d)
		if err != nil {
			return
		}
		if !notified && !poll {
			continue
		}
		// Not cancelled when the tenure ends: pgx closes a connection
		// whose query was cancelled, and a pool's would be lost to its
		// other callers meanwhile. The read is short; unwatched waits.
		rctx, stop := context.WithTimeout(context.Background(), t.ttl/3)
		asked, err := t.c.q.LeaseReleaseAsked(rctx, db.LeaseReleaseAskedParams{Name: t.name, Fence: t.fence})
		stop()
		switch {
		case err == nil && asked:
			t.Ask()
			return
		case err == nil || ctx.Err() != nil:
		case isUndefinedColumn(err): // a schema before 0.3.0: nothing to request
			return
		default:
			t.c.cfg.Logger.Debug("pglease: could not look for a release request", "name", t.name, "fence", t.fence, "err", err)
		}
	}
}

// Name returns the lease name or slot scope.
func (t *Tenure) Name() string { return t.name }

// Slot returns the slot number, 0 for a lease.
func (t *Tenure) Slot() int { return t.slot }

// Fence returns the tenure's fence.
func (t *Tenure) Fence() int64 { return t.fence }

// Holder returns the identity holding the tenure.
func (t *Tenure) Holder() string { return t.c.cfg.Holder }

// TTL returns the time to live each grant or renewal asks for.
func (t *Tenure) TTL() time.Duration { return t.ttl }

// Deadline returns the local time after which the tenure must be assumed
// gone.
func (t *Tenure) Deadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}

// Done returns a channel closed once the tenure can no longer be trusted:
// its deadline passed, a renewal was refused, or it was released.
func (t *Tenure) Done() <-chan struct{} { return t.done }

// expire closes done if the deadline has passed, else waits for it again
// (a renewal moved it while the timer fired).
func (t *Tenure) expire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if left := time.Until(t.deadline); left > 0 && !t.ended {
		t.over.Reset(left)
		return
	}
	if !t.ended {
		t.abandoned = true
	}
	t.endLocked(t.deadlineReason())
}

// endLost ends t as Run's Hold found it lost, for cause (HoldResult.Cause),
// unless it has ended already.
func (t *Tenure) endLost(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	why := lossConnection // ErrNoTime: a renewal failed with no time left
	switch {
	case errors.Is(cause, ErrRefused):
		why = lossRefused
	case errors.Is(cause, ErrDeadline):
		why = t.deadlineReason()
	}
	t.endLocked(why)
}

// deadlineReason says why t's deadline passed: connection when renewals
// were failing or one was in flight (the keeper's, for a kept tenure),
// else deadline (none was made in time). t.mu is held.
func (t *Tenure) deadlineReason() lossReason {
	troubled := t.renewing > 0 || t.failed
	if t.k != nil {
		troubled = t.k.troubled()
	}
	if troubled {
		return lossConnection
	}
	return lossDeadline
}

// endLocked closes done, once, and measures the end: why is the loss's
// reason, noLoss for an end that is not a loss. t.mu is held.
func (t *Tenure) endLocked(why lossReason) {
	if t.ended {
		return
	}
	t.ended = true
	t.over.Stop()
	// Measured before done closes: whoever waits on Done sees the loss.
	ctx := context.Background()
	t.c.m.held.Add(ctx, -1, t.a.base.Add...)
	if why != noLoss {
		t.c.m.losses.Add(ctx, 1, t.a.lost[why].Add...)
	}
	close(t.done)
}

// Renew extends the tenure by its TTL from now and moves the deadline. It
// returns an error matching the kind's lost sentinel when the server
// refused; any other error leaves the outcome unknown. A tenure kept by a
// Keeper makes no call of its own: Renew returns at once when a round
// moved the deadline since the previous Renew returned, and otherwise
// waits for the keeper's next round and returns its verdict on the tenure.
func (t *Tenure) Renew(ctx context.Context) error {
	if t.k != nil {
		return t.k.renew(ctx, t)
	}
	t.mu.Lock()
	t.renewing++
	t.mu.Unlock()
	sent := time.Now()
	var (
		renewed bool
		err     error
	)
	if t.slot == 0 {
		renewed, err = t.renewLease(ctx)
	} else {
		var row db.SlotRenewRow
		row, err = t.c.q.SlotRenew(ctx, db.SlotRenewParams{
			Scope: t.name, Slot: int32(t.slot), Holder: t.c.cfg.Holder, Fence: t.fence, Ttl: t.ttl,
		})
		renewed = row.Renewed
	}
	now := time.Now()
	if err != nil {
		err = t.c.Interpret(ctx, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.renewing--
	m := t.c.m
	switch {
	case errors.Is(err, context.Canceled):
		// Cut off by its caller: Run's workload returned (the tenure is
		// released next), or Run's deadline passed while it hung. No
		// outcome to measure, but it is unknown: a deadline that passes
		// now passed with renewals failing (lossConnection), whether the
		// deadline or this return is seen first.
		t.failed = true
		return err
	case err != nil:
		t.failed = true
		m.renewTime.Record(ctx, now.Sub(sent).Seconds(), t.a.renewed[renewError].Record...)
		return err
	case !renewed:
		m.renewTime.Record(ctx, now.Sub(sent).Seconds(), t.a.renewed[renewRefused].Record...)
		t.endLocked(lossRefused)
		return t.c.kind.Lost
	}
	t.failed = false
	m.renewTime.Record(ctx, now.Sub(sent).Seconds(), t.a.renewed[renewOK].Record...)
	if d := sent.Add(t.ttl - t.margin); d.After(t.deadline) {
		t.deadline = d
	}
	if !t.ended {
		m.margin.Record(ctx, max(t.deadline.Sub(now), 0).Seconds(), t.a.base.Record...)
	}
	return nil
}

// renewLease renews a lease with renew_lease, which also says whether a
// release was requested (closing Asked), or with the renew of schemas
// before 0.3.0.
func (t *Tenure) renewLease(ctx context.Context) (bool, error) {
	if t.c.Modern() {
		row, err := t.c.q.LeaseRenewAsked(ctx, db.LeaseRenewAskedParams{
			Name: t.name, Holder: t.c.cfg.Holder, Fence: t.fence, Ttl: t.ttl,
		})
		if err == nil || !t.c.Missing(err) {
			if row.ReleaseRequested {
				t.Ask()
			}
			return row.Renewed, err
		}
	}
	row, err := t.c.q.LeaseRenew(ctx, db.LeaseRenewParams{
		Name: t.name, Holder: t.c.cfg.Holder, Fence: t.fence, Ttl: t.ttl,
	})
	return row.Renewed, err
}

// Release ends the tenure on the server, by compare-and-set on holder and
// fence, and closes Done. It returns the kind's lost sentinel when the
// tenure had already ended. On a pool, or a connection outside a
// transaction block, the release commits without waiting for its WAL
// flush (see package asyncrelease). A tenure kept by a Keeper leaves it,
// and ends even when the release failed: the keeper releases it after any
// later round that still renewed it.
func (t *Tenure) Release(ctx context.Context) error {
	defer t.unwatched()
	released, err := t.release(ctx, asyncrelease.OK(t.c.db))
	if err != nil {
		t.c.unsure.remember(t, err)
	}
	if t.k != nil {
		if err != nil {
			t.mu.Lock()
			t.abandoned = t.abandoned || !t.ended
			t.endLocked(noLoss)
			t.mu.Unlock()
		} else {
			t.k.deregister(t)
		}
	}
	if err != nil {
		return t.c.Interpret(ctx, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !released {
		t.endLocked(lossRefused) // over on the server already
		return t.c.kind.Lost
	}
	t.endLocked(noLoss)
	t.c.m.releases.Add(ctx, 1, t.a.base.Add...)
	t.deadline = time.Now()
	return nil
}

// release runs the release query of the tenure's kind.
func (t *Tenure) release(ctx context.Context, async bool) (bool, error) {
	q, h := t.c.q, t.c.cfg.Holder
	switch {
	case t.slot == 0 && t.holdAtLeast > 0:
		r, err := q.LeaseReleaseAfter(ctx, db.LeaseReleaseAfterParams{Name: t.name, Holder: h, Fence: t.fence, HoldAtLeast: t.holdAtLeast})
		return r.Released, err
	case t.slot == 0 && async && t.c.ReleaseLease != nil:
		return t.c.ReleaseLease(ctx, t.name, t.fence)
	case t.slot == 0 && async:
		return q.LeaseReleaseAsync(ctx, db.LeaseReleaseAsyncParams{Name: t.name, Holder: h, Fence: t.fence})
	case t.slot == 0:
		return q.LeaseRelease(ctx, db.LeaseReleaseParams{Name: t.name, Holder: h, Fence: t.fence})
	case async:
		return q.SlotReleaseAsync(ctx, db.SlotReleaseAsyncParams{Scope: t.name, Slot: int32(t.slot), Holder: h, Fence: t.fence})
	default:
		return q.SlotRelease(ctx, db.SlotReleaseParams{Scope: t.name, Slot: int32(t.slot), Holder: h, Fence: t.fence})
	}
}

// What a Keeper's round makes of a registered tenure.
const (
	settleKept   = iota // renewed, or still live: keep it registered
	settleLost          // live but not renewed: it is lost
	settleDrop          // ended (released or lost): forget it
	settleZombie        // ended locally while the server may hold it
)

// settle applies a round sent at sent and answered at now, renewing to
// ttl, to t: renewed says whether the round renewed t's fence.
func (t *Tenure) settle(renewed bool, sent, now time.Time, ttl time.Duration) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.ended && t.abandoned:
		return settleZombie
	case t.ended:
		return settleDrop
	case !renewed:
		return settleLost
	}
	if d := sent.Add(ttl - t.c.cfg.Margin(ttl)); d.After(t.deadline) {
		t.deadline = d
	}
	t.c.m.margin.Record(context.Background(), max(t.deadline.Sub(now), 0).Seconds(), t.a.base.Record...)
	return settleKept
}

// lose ends t as reported lost by a Keeper's round.
func (t *Tenure) lose() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ended {
		t.err = fmt.Errorf("%w: %s was released, taken over or expired (renew_holder did not renew it)", t.c.kind.Lost, t.describe())
		t.endLocked(lossRefused)
	}
}

// endErr returns why t ended, as an error matching the kind's lost
// sentinel that names the tenure.
func (t *Tenure) endErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	return fmt.Errorf("%w: %s ended (local deadline passed, or released)", t.c.kind.Lost, t.describe())
}

// news reports whether a round moved t's deadline since the last kept
// Renew returned, and records the deadline as seen.
func (t *Tenure) news() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	moved := t.deadline.After(t.seen)
	t.seen = t.deadline
	return moved
}

// isEnded reports whether done is closed.
func (t *Tenure) isEnded() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended
}

// describe names t in errors: its kind, name, slot and fence.
func (t *Tenure) describe() string {
	if t.slot == 0 {
		return fmt.Sprintf("%s %q fence %d", t.c.kind.Noun, t.name, t.fence)
	}
	return fmt.Sprintf("%s %d of scope %q fence %d", t.c.kind.Noun, t.slot, t.name, t.fence)
}
