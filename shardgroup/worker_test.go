package shardgroup_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/shardgroup"
)

// fleet records, in this process, who runs which shard: a shard's function
// must never start while another's still runs (the graceful handover's
// promise), and each start must see a larger fence than the last.
type fleet struct {
	t      *testing.T
	m      int
	mu     sync.Mutex
	owner  map[string]string
	fence  map[string]int64
	starts int
	events chan struct{}
	errs   []string
}

func newFleet(t *testing.T, m int) *fleet {
	return &fleet{t: t, m: m, owner: map[string]string{}, fence: map[string]int64{}, events: make(chan struct{}, 1)}
}

func (f *fleet) signal() {
	select {
	case f.events <- struct{}{}:
	default:
	}
}

func (f *fleet) fn(member string) shardgroup.Func {
	return func(ctx context.Context, s shardgroup.Shard) error {
		f.mu.Lock()
		if o := f.owner[s.Name]; o != "" {
			f.errs = append(f.errs, fmt.Sprintf("shard %s started on %s while %s still ran it", s.Name, member, o))
		}
		if s.Fence <= f.fence[s.Name] {
			f.errs = append(f.errs, fmt.Sprintf("shard %s: fence %d after %d", s.Name, s.Fence, f.fence[s.Name]))
		}
		f.owner[s.Name], f.fence[s.Name] = member, s.Fence
		f.starts++
		f.mu.Unlock()
		f.signal()
		<-ctx.Done()
		f.mu.Lock()
		f.owner[s.Name] = ""
		f.mu.Unlock()
		f.signal()
		return nil
	}
}

// counts returns the shards each running member owns, and the number owned.
func (f *fleet) counts() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := map[string]int{}
	n := 0
	for _, o := range f.owner {
		if o != "" {
			c[o]++
			n++
		}
	}
	return c, n
}

// balanced reports whether every shard runs and each of members runs
// floor(M/N) or ceil(M/N) of them.
func (f *fleet) balanced(members []string) bool {
	c, n := f.counts()
	if n != f.m {
		return false
	}
	lo, hi := f.m/len(members), (f.m+len(members)-1)/len(members)
	for _, m := range members {
		if c[m] < lo || c[m] > hi {
			return false
		}
	}
	return len(c) == len(members)
}

// await waits for cond, re-checked at each start or stop of a function.
func (f *fleet) await(what string, timeout time.Duration, cond func() bool) time.Duration {
	f.t.Helper()
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-f.events:
		case <-deadline.C:
			c, n := f.counts()
			f.t.Fatalf("%s: not within %s (owned %d of %d: %v)", what, timeout, n, f.m, c)
		}
	}
	return time.Since(start)
}

func (f *fleet) check() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) > 0 {
		f.t.Fatalf("%d violations:\n%s", len(f.errs), strings.Join(f.errs, "\n"))
	}
}

func (f *fleet) startCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts
}

type member struct {
	w      *shardgroup.Worker
	cancel context.CancelFunc
	done   chan error
}

func join(t *testing.T, pool *pgxpool.Pool, f *fleet, cfg shardgroup.Config) *member {
	t.Helper()
	cfg.Shards = cmp(cfg.Shards, f.m)
	w, err := shardgroup.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- w.Run(ctx, f.fn(cfg.Member)) }()
	t.Cleanup(func() {
		cancel()
		<-m.done
	})
	return m
}

func cmp(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func (m *member) leave(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.w.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if err := <-m.done; !errors.Is(err, shardgroup.ErrLeft) {
		t.Fatalf("Run after Leave = %v, want ErrLeft", err)
	}
	m.done <- shardgroup.ErrLeft
}

// TestConvergence joins 1, then 2, then 8 workers and leaves down to 3,
// waiting for balance each time, and reports the time and the moves
// against the minimum.
func TestConvergence(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	const m = 64
	f := newFleet(t, m)
	cfg := func(i int) shardgroup.Config {
		return shardgroup.Config{Group: "conv", Member: fmt.Sprintf("w%d", i), TTL: 3 * time.Second, Interval: time.Second}
	}
	var ms []*member
	var names []string
	step := func(label string, minimum, before int, began time.Time) {
		f.await(label, 20*time.Second, func() bool { return f.balanced(names) })
		took := time.Since(began)
		moves := f.startCount() - before
		t.Logf("%s: balanced after %s, %d moves (minimum %d)", label, took.Round(time.Millisecond), moves, minimum)
		if moves > 2*minimum+len(names) {
			t.Errorf("%s: %d moves, more than twice the minimum %d plus one per worker", label, moves, minimum)
		}
	}
	ms = append(ms, join(t, pool, f, cfg(0)))
	names = append(names, "w0")
	f.await("one worker owns every shard", 20*time.Second, func() bool { return f.balanced(names) })
	before, began := f.startCount(), time.Now()
	ms = append(ms, join(t, pool, f, cfg(1)))
	names = append(names, "w1")
	step("1->2 workers", m/2, before, began)
	before, began = f.startCount(), time.Now()
	for i := 2; i < 8; i++ {
		ms = append(ms, join(t, pool, f, cfg(i)))
		names = append(names, fmt.Sprintf("w%d", i))
	}
	step("2->8 workers", m-2*(m/8), before, began)
	before, began = f.startCount(), time.Now()
	for i := 7; i >= 3; i-- {
		ms[i].leave(t)
		names = names[:i]
	}
	step("8->3 workers (graceful leaves, one after another)", 5*(m/8), before, began)
	f.check()
}

// TestRollingRestart leaves and rejoins each of 4 workers in turn.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	const m = 32
	f := newFleet(t, m)
	var names []string
	ms := make([]*member, 4)
	for i := range ms {
		names = append(names, fmt.Sprintf("r%d", i))
		ms[i] = join(t, pool, f, shardgroup.Config{Group: "roll", Member: names[i], TTL: 3 * time.Second, Interval: time.Second})
	}
	f.await("4 workers balanced", 20*time.Second, func() bool { return f.balanced(names) })
	before := f.startCount()
	start := time.Now()
	for i := range ms {
		ms[i].leave(t)
		ms[i] = join(t, pool, f, shardgroup.Config{Group: "roll", Member: names[i] + "b", TTL: 3 * time.Second, Interval: time.Second})
		names[i] += "b"
		f.await("rebalanced after restarting "+names[i], 20*time.Second, func() bool { return f.balanced(names) })
	}
	t.Logf("rolling restart of 4 workers, M=%d: %s, %d moves (minimum %d: each restart moves its %d shards out and back)",
		m, time.Since(start).Round(time.Millisecond), f.startCount()-before, 4*2*(m/4), m/4)
	f.check()
}

// TestMaximum: a worker with MaxShards 3 takes 3; the other takes the rest.
func TestMaximum(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	const m = 20
	f := newFleet(t, m)
	join(t, pool, f, shardgroup.Config{Group: "max", Member: "big", TTL: 3 * time.Second, Interval: time.Second})
	join(t, pool, f, shardgroup.Config{Group: "max", Member: "small", MaxShards: 3, TTL: 3 * time.Second, Interval: time.Second})
	took := f.await("small owns its maximum, big the rest", 20*time.Second, func() bool {
		c, n := f.counts()
		return n == m && c["small"] == 3 && c["big"] == m-3
	})
	t.Logf("a worker with a maximum of 3 of %d: balanced after %s", m, took.Round(time.Millisecond))
	f.check()
}

// TestKilledMemberShardsTakenWithinTTL: a member that syncs once (straight
// in SQL) and dies leaves its shards to the worker within TTL + Interval.
func TestKilledMemberShardsTakenWithinTTL(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	ctx := context.Background()
	const m = 8
	const ttl, interval = 2 * time.Second, 500 * time.Millisecond
	if _, err := pool.Exec(ctx, `SELECT pglease.group_create('kill', 8, NULL)`); err != nil {
		t.Fatal(err)
	}
	var owned []string
	if err := pool.QueryRow(ctx, `SELECT shards FROM pglease.group_sync('kill', 'ghost', $1, NULL)`, ttl).Scan(&owned); err != nil {
		t.Fatal(err)
	}
	died := time.Now()
	if len(owned) != m {
		t.Fatalf("the ghost owns %v, want all %d shards", owned, m)
	}
	f := newFleet(t, m)
	join(t, pool, f, shardgroup.Config{Group: "kill", Member: "live", TTL: ttl, Interval: interval})
	f.await("the survivor owns every shard", 10*time.Second, func() bool { return f.balanced([]string{"live"}) })
	took := time.Since(died)
	t.Logf("shards of a killed member owned again %s after its last sync (TTL %s + interval %s)", took.Round(time.Millisecond), ttl, interval)
	if bound := ttl + interval + 500*time.Millisecond; took > bound {
		t.Errorf("owned again after %s, want within TTL + Interval (+0.5s scheduling) = %s", took, bound)
	}
	f.check()
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, tc := range []struct {
		cfg   shardgroup.Config
		field string
	}{
		{shardgroup.Config{Shards: 4}, "Config.Group"},
		{shardgroup.Config{Group: "a/b", Shards: 4}, "Config.Group"},
		{shardgroup.Config{Group: "g"}, "Config.Shards"},
		{shardgroup.Config{Group: "g", Shards: shardgroup.MaxShards + 1}, "Config.Shards"},
		{shardgroup.Config{Group: "g", Shards: 2, Names: []string{"a"}}, "Config.Shards"},
		{shardgroup.Config{Group: "g", Names: []string{"a", "a"}}, "Config.Names"},
		{shardgroup.Config{Group: "g", Names: []string{""}}, "Config.Names"},
		{shardgroup.Config{Group: "g", Shards: 4, MaxShards: -1}, "Config.MaxShards"},
		{shardgroup.Config{Group: "g", Shards: 4, TTL: -time.Second}, "Config.TTL"},
		{shardgroup.Config{Group: "g", Shards: 4, TTL: time.Second, SafetyMargin: time.Second}, "Config.SafetyMargin"},
		{shardgroup.Config{Group: "g", Shards: 4, TTL: time.Second, Interval: time.Second}, "Config.Interval"},
	} {
		_, err := shardgroup.New(pool, tc.cfg)
		if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want ErrInvalidArgument naming %s", tc.cfg, err, tc.field)
		}
	}
}

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return fmt.Sprint(err)
}

// TestBadInputRefused: each refused with its SQLSTATE, nothing changed.
func TestBadInputRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `SELECT pglease.group_create('g', 4, NULL)`); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT (SELECT row(l.*)::text FROM pglease.group_list() AS l)
			|| (SELECT coalesce(string_agg(row(m.*)::text, ','), '') FROM pglease.group_members AS m)
			|| (SELECT count(*) FROM pglease.leases)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := state()
	for _, tc := range []struct{ sql, code string }{
		{`SELECT pglease.group_create('h', 0, NULL)`, "22023"},
		{`SELECT pglease.group_create('h', 100001, NULL)`, "22023"},
		{`SELECT pglease.group_create('h', NULL, '{a,b,a}')`, "22023"},
		{`SELECT pglease.group_create('h', NULL, '{}')`, "22023"},
		{`SELECT pglease.group_create('h', NULL, NULL)`, "22004"},
		{`SELECT pglease.group_create('h/x', 4, NULL)`, "22023"},
		{`SELECT pglease.group_create('{h}', 4, NULL)`, "22023"},
		{`SELECT pglease.group_create('g', 5, NULL)`, "PGL11"},
		{`SELECT pglease.group_sync('g', 'm', '10s', 0)`, "22023"},
		{`SELECT pglease.group_sync('nope', 'm', '10s', NULL)`, "PGL10"},
		{`SELECT pglease.group_sync('g', 'm', '0s', NULL)`, "22023"},
		{`SELECT pglease.group_release('g', '0', 'm', -1)`, "22023"},
		{`SELECT pglease.group_leave('nope', 'm')`, "PGL10"},
	} {
		_, err := pool.Exec(ctx, tc.sql)
		if got := sqlstate(err); got != tc.code {
			t.Errorf("%s: SQLSTATE %s, want %s", tc.sql, got, tc.code)
		}
	}
	if after := state(); after != before {
		t.Fatalf("a refused call changed the state:\n got %s\nwant %s", after, before)
	}
}

// TestOtherRoleRefused: another role can neither sync in the group (as any
// member), nor renew or release a member's live shard, nor take any shard's
// lease.
func TestOtherRoleRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var fence int64
	if err := pool.QueryRow(ctx, `SELECT (pglease.group_create('g', 2, NULL)).created IS NOT NULL,
		(SELECT fences[1] FROM pglease.group_sync('g', 'owner', '1 hour', NULL))`).Scan(new(bool), &fence); err != nil {
		t.Fatal(err)
	}
	role := fmt.Sprintf("pglease_shards_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN IN ROLE pglease_client`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP ROLE `+role) })
	u, err := url.Parse(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{
		`SELECT pglease.group_sync('g', 'owner', '1 hour', NULL)`,
		`SELECT pglease.group_sync('g', 'stranger', '1 hour', NULL)`,
		`SELECT pglease.group_leave('g', 'owner')`,
		`SELECT pglease.group_release('g', '0', 'owner', ` + fmt.Sprint(fence) + `)`,
	} {
		if _, err := conn.Exec(ctx, sql); sqlstate(err) != "42501" {
			t.Errorf("%s as another role: %v, want 42501", sql, err)
		}
	}
	var released, renewed bool
	lease := shardgroup.Shard{Group: "g", Name: "0"}.LeaseName()
	if err := conn.QueryRow(ctx, `SELECT pglease.release($1, 'owner', $2),
		(pglease.renew($1, 'owner', $2, '1 hour')).renewed`,
		lease, fence).Scan(&released, &renewed); err != nil {
		t.Fatal(err)
	}
	if released || renewed {
		t.Fatalf("another role as 'owner': released %v, renewed %v; want both false", released, renewed)
	}
	// A group's shard leases belong to its role (0.3.0): another role may
	// not even ask for one, held or free.
	for _, shard := range []string{"0", "1"} {
		if _, err := conn.Exec(ctx, `SELECT pglease.acquire($1, 'owner', '1 hour')`, shardgroup.Shard{Group: "g", Name: shard}.LeaseName()); sqlstate(err) != "42501" {
			t.Errorf("acquire of shard %s's lease as another role: %v, want 42501", shard, err)
		}
	}
}

// TestFloodingMember: a member of the group's role that joins and leaves
// 50 times in a row (straight in SQL) makes the others hand over some
// shards, but no shard is lost and balance comes back; the moves it cost
// are reported (docs/security.md).
func TestFloodingMember(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDirectPool(t)
	ctx := context.Background()
	const m = 32
	f := newFleet(t, m)
	names := []string{"a", "b"}
	for _, n := range names {
		join(t, pool, f, shardgroup.Config{Group: "flood", Member: n, TTL: 3 * time.Second, Interval: time.Second})
	}
	f.await("2 workers balanced", 20*time.Second, func() bool { return f.balanced(names) })
	before := f.startCount()
	start := time.Now()
	const floods = 50
	for i := range floods {
		if _, err := pool.Exec(ctx, `SELECT pglease.group_sync('flood', 'flooder', '3 seconds', NULL)`); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `SELECT pglease.group_leave('flood', 'flooder')`); err != nil {
			t.Fatal(err)
		}
		_ = i
	}
	flooded := time.Since(start)
	// The flooder may still hold shards it took: it releases nothing, so
	// they come back at its tenures' expiry (TTL) at the latest.
	took := f.await("balanced again after the flood", 20*time.Second, func() bool { return f.balanced(names) })
	t.Logf("%d joins and leaves in %s by one member: %d moves, balanced again %s after the flood (M=%d, 2 workers)",
		floods, flooded.Round(time.Millisecond), f.startCount()-before, took.Round(time.Millisecond), m)
	f.check()
}
