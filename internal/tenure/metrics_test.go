package tenure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/testing/metrictest"
)

// renewDB answers a lease's renewals with what renew returns (it may
// block on ctx, or sleep on the bubble's clock), its releases with
// released, and a Keeper's rounds with round. Other queries fail.
type renewDB struct {
	mu       sync.Mutex
	renew    func(ctx context.Context) (bool, error)
	released bool
	round    func() (db.HolderRenewRow, error)
}

func (d *renewDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNoDB
}
func (d *renewDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNoDB }

func (d *renewDB) QueryRow(ctx context.Context, sql string, _ ...any) pgx.Row {
	d.mu.Lock()
	renew, released, round := d.renew, d.released, d.round
	d.mu.Unlock()
	switch {
	case strings.Contains(sql, "name: LeaseRenew "), strings.Contains(sql, "name: LeaseRenewAsked "):
		ok, err := renew(ctx)
		return renewedRow{ok, err}
	case strings.Contains(sql, "name: LeaseRelease"):
		return boolRow(released)
	case strings.Contains(sql, "name: HolderRenew") && round != nil:
		r, err := round()
		return renewRow{r, err}
	}
	return errRow{}
}

// set replaces the answer to renewals.
func (d *renewDB) set(renew func(ctx context.Context) (bool, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.renew = renew
}

type renewedRow struct {
	ok  bool
	err error
}

func (r renewedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	*dest[0].(*bool) = r.ok
	return nil
}

// renewed answers every renewal with renewed.
func renewed(ok bool) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) { return ok, nil }
}

// hang blocks every renewal until its context ends.
func hang(ctx context.Context) (bool, error) {
	<-ctx.Done()
	return false, ctx.Err()
}

// metricKind is the lease kind, with a LostError for Run.
var metricKind = Kind{Noun: "lease", Prefix: "pglease", Lost: ErrLeaseLost,
	LostError: func(t *Tenure, cause, _ error) error { return fmt.Errorf("lost %s: %w", t.describe(), cause) }}

var leaseAttr = AttrKind.String("lease")

// meteredCore returns a lease core on d that measures into a new reader.
func meteredCore(t *testing.T, d DB, cfg Config) (*Core, *metrictest.Reader) {
	t.Helper()
	r := metrictest.New(t)
	cfg.MeterProvider, cfg.Logger = r.Provider, quiet
	c, err := New(d, metricKind, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

// wantSum fails t unless the sum name at kvs is want.
func wantSum(t *testing.T, r *metrictest.Reader, want int64, name string, kvs ...attribute.KeyValue) {
	t.Helper()
	if got, _ := r.Sum(t, name, kvs...); got != want {
		t.Errorf("%s%v = %d, want %d; recorded:\n%s", name, kvs, got, want, r.Dump(t))
	}
}

// TestRenewMeasured: a grant counts an acquisition and a tenure held; a
// renewal its round trip and the margin it leaves, to the nanosecond on
// the bubble's clock; a release a release, and the tenure no longer held.
func TestRenewMeasured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &renewDB{released: true, renew: func(context.Context) (bool, error) {
			time.Sleep(10 * time.Millisecond)
			return true, nil
		}}
		c, r := meteredCore(t, d, Config{})
		tn := c.Grant("a", 0, 1, time.Second, time.Now())
		wantSum(t, r, 1, "pglease.tenure.acquisitions", leaseAttr)
		wantSum(t, r, 1, "pglease.tenure.held", leaseAttr)

		time.Sleep(300 * time.Millisecond)
		if err := tn.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		rt, ok := r.Histogram(t, "pglease.renew.duration", leaseAttr, AttrRenewOutcome.String("renewed"))
		if !ok || rt.Count != 1 || rt.Sum != 0.01 {
			t.Fatalf("pglease.renew.duration{renewed}: count %d sum %g, want 1 and 0.01 s", rt.Count, rt.Sum)
		}
		// Sent at 300ms: deadline 300 + 1000 - 100 = 1200ms; answered at 310ms.
		m, ok := r.Histogram(t, "pglease.renew.margin", leaseAttr)
		if !ok || m.Count != 1 || m.Sum != 0.89 {
			t.Fatalf("pglease.renew.margin: count %d sum %g, want 1 and 0.89 s", m.Count, m.Sum)
		}

		if err := tn.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantSum(t, r, 1, "pglease.tenure.releases", leaseAttr)
		wantSum(t, r, 0, "pglease.tenure.held", leaseAttr)
		if _, ok := r.Metrics(t)["pglease.tenure.losses"]; ok {
			t.Errorf("a release counted as a loss:\n%s", r.Dump(t))
		}
	})
}

// TestLossReasons: each way a tenure is lost is counted once, with its
// reason, and the tenure is no longer held.
func TestLossReasons(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		lose   func(t *testing.T, c *Core, d *renewDB, tn *Tenure)
	}{
		{"not renewed", "deadline", func(t *testing.T, _ *Core, _ *renewDB, tn *Tenure) {
			<-tn.Done()
		}},
		{"renewal refused", "refused", func(t *testing.T, _ *Core, d *renewDB, tn *Tenure) {
			d.set(renewed(false))
			if err := tn.Renew(context.Background()); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("Renew = %v, want ErrLeaseLost", err)
			}
		}},
		{"release finds it gone", "refused", func(t *testing.T, _ *Core, d *renewDB, tn *Tenure) {
			d.mu.Lock()
			d.released = false
			d.mu.Unlock()
			if err := tn.Release(context.Background()); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("Release = %v, want ErrLeaseLost", err)
			}
		}},
		{"renewal failed, then the deadline", "connection", func(t *testing.T, _ *Core, d *renewDB, tn *Tenure) {
			d.set(func(context.Context) (bool, error) { return false, errNoDB })
			if err := tn.Renew(context.Background()); !errors.Is(err, errNoDB) {
				t.Fatalf("Renew = %v, want the connection's error", err)
			}
			<-tn.Done()
		}},
		{"Run: renewals fail until no time is left", "connection", func(t *testing.T, _ *Core, d *renewDB, tn *Tenure) {
			d.set(func(context.Context) (bool, error) { return false, errNoDB })
			runLost(t, tn, ErrNoTime)
		}},
		{"Run: a renewal hangs past the deadline", "connection", func(t *testing.T, _ *Core, d *renewDB, tn *Tenure) {
			d.set(hang)
			runLost(t, tn, ErrDeadline)
		}},
		{"Run: renewal refused", "refused", func(t *testing.T, _ *Core, d *renewDB, tn *Tenure) {
			d.set(renewed(false))
			runLost(t, tn, ErrRefused)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := &renewDB{renew: renewed(true)}
				c, r := meteredCore(t, d, Config{})
				tn := c.Grant("a", 0, 1, time.Second, time.Now())
				tc.lose(t, c, d, tn)
				synctest.Wait()
				wantSum(t, r, 1, "pglease.tenure.losses", leaseAttr, AttrLossReason.String(tc.reason))
				wantSum(t, r, 0, "pglease.tenure.held", leaseAttr)
				if n := r.Total(t, "pglease.tenure.losses"); n != 1 {
					t.Errorf("%d losses counted, want 1:\n%s", n, r.Dump(t))
				}
			})
		})
	}
}

// runLost runs a workload under tn with Run, which must report the tenure
// lost for cause.
func runLost(t *testing.T, tn *Tenure, cause error) {
	t.Helper()
	err := tn.Run(context.Background(), func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, cause) {
		t.Fatalf("Run = %v, want a loss for %v", err, cause)
	}
}

// meteredKeeper returns a keeper on d (TTL 1s, Interval 300ms, RetryDelay
// 50ms) and a lease core that uses it, measuring into one reader.
func meteredKeeper(t *testing.T, d DB) (*Keeper, *Core, *metrictest.Reader) {
	t.Helper()
	r := metrictest.New(t)
	k, err := NewKeeper(d, KeeperConfig{Holder: "h", TTL: time.Second, Interval: 300 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond, Logger: quiet, MeterProvider: r.Provider})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(d, metricKind, Config{Keeper: k, Logger: quiet, MeterProvider: r.Provider})
	if err != nil {
		t.Fatal(err)
	}
	return k, c, r
}

// TestKeptLossReasons: a kept tenure is lost as refused when a round does
// not renew it, to the connection when the rounds fail until its
// deadline, and to the deadline when no round runs.
func TestKeptLossReasons(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		round        func() (db.HolderRenewRow, error) // nil: the keeper does not run
	}{
		{"round does not renew it", "refused", func() (db.HolderRenewRow, error) { return db.HolderRenewRow{}, nil }},
		{"rounds fail", "connection", func() (db.HolderRenewRow, error) { return db.HolderRenewRow{}, errNoDB }},
		{"keeper not running", "deadline", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := &renewDB{round: tc.round}
				k, c, r := meteredKeeper(t, d)
				tn := c.Grant("a", 0, 1, time.Second, time.Now())
				if tc.round != nil {
					runKeeper(t, k)
				}
				<-tn.Done()
				wantSum(t, r, 1, "pglease.tenure.losses", leaseAttr, AttrLossReason.String(tc.reason))
				wantSum(t, r, 0, "pglease.tenure.held", leaseAttr)
				if n := r.Total(t, "pglease.tenure.losses"); n != 1 {
					t.Errorf("%d losses counted, want 1:\n%s", n, r.Dump(t))
				}
			})
		})
	}
}

// TestKeeperRoundMeasured: each round's round trip is measured with its
// outcome, the tenures a successful one renewed, and the margin it left
// each kept tenure.
func TestKeeperRoundMeasured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		fail := false
		d := &renewDB{round: func() (db.HolderRenewRow, error) {
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return db.HolderRenewRow{}, errNoDB
			}
			return db.HolderRenewRow{Leases: []string{"a", "b", "dropped"}, LeaseFences: []int64{1, 2, 3}}, nil
		}}
		k, c, r := meteredKeeper(t, d)
		c.Grant("a", 0, 1, time.Second, time.Now())
		c.Grant("b", 0, 2, time.Second, time.Now())
		runKeeper(t, k)
		time.Sleep(25 * time.Millisecond) // past the first round, sent at 0, answered at 20ms
		synctest.Wait()

		rt, ok := r.Histogram(t, "pglease.keeper.round.duration", AttrRenewOutcome.String("renewed"))
		if !ok || rt.Count != 1 || rt.Sum != 0.02 {
			t.Fatalf("pglease.keeper.round.duration{renewed}: count %d sum %g, want 1 and 0.02 s", rt.Count, rt.Sum)
		}
		n, ok := r.IntHistogram(t, "pglease.keeper.round.tenures")
		if !ok || n.Count != 1 || n.Sum != 3 {
			t.Fatalf("pglease.keeper.round.tenures: count %d sum %d, want one round of 3 (what the server renewed)", n.Count, n.Sum)
		}
		// Sent at 0: deadline 900ms; answered at 20ms.
		m, ok := r.Histogram(t, "pglease.renew.margin", leaseAttr)
		if !ok || m.Count != 2 || m.Sum != 2*0.88 {
			t.Fatalf("pglease.renew.margin: count %d sum %g, want 2 × 0.88 s", m.Count, m.Sum)
		}

		mu.Lock()
		fail = true
		mu.Unlock()
		time.Sleep(300 * time.Millisecond) // past the second round, sent at 300ms, failed at 320ms
		synctest.Wait()
		if rt, ok := r.Histogram(t, "pglease.keeper.round.duration", AttrRenewOutcome.String("error")); !ok || rt.Count != 1 {
			t.Fatalf("pglease.keeper.round.duration{error}: count %d, want 1:\n%s", rt.Count, r.Dump(t))
		}
	})
}

// TestMetricsByName: a client's measurements carry the kind only, unless
// Config.MetricsByName adds the name: one series per name on demand, not
// one per entity by default.
func TestMetricsByName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &renewDB{renew: renewed(true)}
		c, r := meteredCore(t, d, Config{})
		for i := range 3 {
			c.Grant(fmt.Sprint("order:", i), 0, 1, time.Second, time.Now())
			c.Refused(context.Background(), fmt.Sprint("order:", i))
		}
		wantSum(t, r, 3, "pglease.tenure.held", leaseAttr)
		wantSum(t, r, 3, "pglease.tenure.refusals", leaseAttr)

		c, r = meteredCore(t, d, Config{MetricsByName: true})
		for _, name := range []string{"a", "b", "a"} {
			c.Grant(name, 0, 1, time.Second, time.Now())
		}
		wantSum(t, r, 2, "pglease.tenure.held", leaseAttr, AttrName.String("a"))
		wantSum(t, r, 1, "pglease.tenure.held", leaseAttr, AttrName.String("b"))
	})
}

// TestRenewAllocs: a renewal measured into an SDK allocates no more than
// its query does alone: the attribute sets are made once, not per call.
func TestRenewAllocs(t *testing.T) {
	d := &renewDB{renew: renewed(true)}
	q := db.New(d)
	query := testing.AllocsPerRun(200, func() {
		if _, err := q.LeaseRenew(context.Background(), db.LeaseRenewParams{Name: "a", Holder: "h", Fence: 1, Ttl: time.Hour}); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no-op provider", Config{MeterProvider: noop.NewMeterProvider()}},
		{"SDK", Config{MeterProvider: metrictest.New(t).Provider}},
		{"SDK, MetricsByName", Config{MeterProvider: metrictest.New(t).Provider, MetricsByName: true}},
	} {
		tc.cfg.Logger = quiet
		c, err := New(d, metricKind, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		tn := c.Grant("a", 0, 1, time.Hour, time.Now())
		renew := testing.AllocsPerRun(200, func() {
			if err := tn.Renew(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
		tn.mu.Lock()
		tn.endLocked(noLoss)
		tn.mu.Unlock()
		if renew > query {
			t.Errorf("%s: Renew allocates %.0f times, its query alone %.0f: want no more", tc.name, renew, query)
		}
	}
}

// BenchmarkRenew measures the client's side of a renewal (its query
// answered at once by renewDB) without metrics and with an SDK and a
// reader: the difference is what measuring costs each renewal.
func BenchmarkRenew(b *testing.B) {
	for _, bc := range []struct {
		name string
		mp   func() metric.MeterProvider
	}{
		{"no-op", func() metric.MeterProvider { return noop.NewMeterProvider() }},
		{"SDK", func() metric.MeterProvider { return metrictest.New(b).Provider }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := New(&renewDB{renew: renewed(true)}, metricKind, Config{MeterProvider: bc.mp(), Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			tn := c.Grant("a", 0, 1, time.Hour, time.Now())
			defer func() {
				tn.mu.Lock()
				defer tn.mu.Unlock()
				tn.endLocked(noLoss)
			}()
			b.ReportAllocs()
			for b.Loop() {
				if err := tn.Renew(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
