package tenure

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/db"
)

// scriptDB answers renew_holder with what its renew returns (after the
// delay it chooses, on the bubble's clock), and records the releases it
// is asked for. Other queries fail.
type scriptDB struct {
	renew func() (db.HolderRenewRow, error)

	mu       sync.Mutex
	releases []string
}

func (d *scriptDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNoDB
}
func (d *scriptDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNoDB }

func (d *scriptDB) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	switch {
	case strings.Contains(sql, "name: HolderRenew"):
		r, err := d.renew()
		return renewRow{r, err}
	case strings.Contains(sql, "name: LeaseRelease"):
		d.mu.Lock()
		defer d.mu.Unlock()
		d.releases = append(d.releases, args[0].(string))
		return boolRow(true)
	}
	return errRow{}
}

type renewRow struct {
	r   db.HolderRenewRow
	err error
}

func (r renewRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	*dest[0].(*[]string), *dest[1].(*[]int64) = r.r.Leases, r.r.LeaseFences
	*dest[2].(*[]string), *dest[3].(*[]int32), *dest[4].(*[]int64) = r.r.SlotScopes, r.r.Slots, r.r.SlotFences
	*dest[5].(*[]string), *dest[6].(*[]string), *dest[7].(*[]int32) = r.r.LostLeases, r.r.LostSlotScopes, r.r.LostSlots
	*dest[8].(*time.Duration) = r.r.ExpiresIn
	return nil
}

type boolRow bool

func (b boolRow) Scan(dest ...any) error { *dest[0].(*bool) = bool(b); return nil }

// quiet discards the keeper's warnings about the failures tests script.
var quiet = slog.New(slog.DiscardHandler)

var leaseKind = Kind{Noun: "lease", Prefix: "pglease", Lost: ErrLeaseLost}

// keptCore returns a keeper on d (TTL 1s, Interval 300ms, RetryDelay 50ms)
// and a lease core that uses it.
func keptCore(t *testing.T, d DB) (*Keeper, *Core) {
	t.Helper()
	k, err := NewKeeper(d, KeeperConfig{Holder: "h", TTL: time.Second, Interval: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(d, leaseKind, Config{Keeper: k})
	if err != nil {
		t.Fatal(err)
	}
	return k, c
}

// runKeeper runs k until the test ends.
func runKeeper(t *testing.T, k *Keeper) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
}

// TestKeeperExtendsFromSend: rounds are sent every Interval however long
// their reply takes (40ms here), each moves the deadline to when it was
// sent + TTL - margin, and they keep the tenure past several TTLs.
func TestKeeperExtendsFromSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &scriptDB{renew: func() (db.HolderRenewRow, error) {
			time.Sleep(40 * time.Millisecond)
			return db.HolderRenewRow{Leases: []string{"a"}, LeaseFences: []int64{7}}, nil
		}}
		k, c := keptCore(t, d)
		tn := c.Grant("a", 0, 7, time.Second, time.Now())
		start := time.Now()
		runKeeper(t, k)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		select {
		case <-tn.Done():
			t.Fatal("Done closed although every round renewed the tenure")
		default:
		}
		// Rounds are sent at 0, 300ms, 600ms, ...: the last before 5s at 4800ms.
		if got, want := tn.Deadline().Sub(start), 4800*time.Millisecond+900*time.Millisecond; got != want {
			t.Fatalf("Deadline %s after start, want %s (last send + TTL - margin)", got, want)
		}
		// Renew returns at once for rounds it has not reported yet, then
		// waits for the next one (sent at 5100ms, answered 40ms later).
		now := time.Now()
		if err := tn.Renew(context.Background()); err != nil || time.Since(now) != 0 {
			t.Fatalf("Renew = %v after %s, want nil at once", err, time.Since(now))
		}
		if err := tn.Renew(context.Background()); err != nil || time.Since(start) != 5140*time.Millisecond {
			t.Fatalf("second Renew = %v at %s, want nil at 5.14s (the next round's reply)", err, time.Since(start))
		}
	})
}

// TestKeeperErrorDoesNotExtend: rounds that fail leave the deadline where
// the grant put it, and the tenure ends there.
func TestKeeperErrorDoesNotExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &scriptDB{renew: func() (db.HolderRenewRow, error) { return db.HolderRenewRow{}, errNoDB }}
		k, c := keptCore(t, d)
		start := time.Now()
		tn := c.Grant("a", 0, 7, time.Second, start)
		runKeeper(t, k)
		<-tn.Done()
		if got := time.Since(start); got != 900*time.Millisecond {
			t.Fatalf("Done closed %s after the grant, want at its deadline (900ms)", got)
		}
		if err := tn.Renew(context.Background()); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Renew after the deadline = %v, want ErrLeaseLost", err)
		}
	})
}

// TestKeeperLost: a tenure the round does not renew ends at once, with an
// error naming it; the one it renews stays.
func TestKeeperLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &scriptDB{renew: func() (db.HolderRenewRow, error) {
			return db.HolderRenewRow{Leases: []string{"kept"}, LeaseFences: []int64{1}, LostLeases: []string{"gone"}}, nil
		}}
		k, c := keptCore(t, d)
		kept := c.Grant("kept", 0, 1, time.Second, time.Now())
		gone := c.Grant("gone", 0, 2, time.Second, time.Now())
		moved := c.Grant("kept", 0, 0, time.Second, time.Now()) // an older fence of the same name
		runKeeper(t, k)
		synctest.Wait()
		for _, tn := range []*Tenure{gone, moved} {
			select {
			case <-tn.Done():
			default:
				t.Fatalf("%s: Done open after a round that did not renew it", tn.describe())
			}
			err := tn.Renew(context.Background())
			if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), tn.describe()) {
				t.Fatalf("Renew = %v, want ErrLeaseLost naming %s", err, tn.describe())
			}
		}
		if err := kept.Renew(context.Background()); err != nil {
			t.Fatalf("Renew of the renewed tenure = %v, want nil (the next round)", err)
		}
		if n := k.Len(); n != 1 {
			t.Fatalf("Len = %d, want 1", n)
		}
	})
}

// TestKeeperGrantedMidRound: a tenure granted while a round runs is not
// judged by it (the call may have started before the grant).
func TestKeeperGrantedMidRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inCall, reply := make(chan struct{}), make(chan struct{})
		d := &scriptDB{renew: func() (db.HolderRenewRow, error) {
			inCall <- struct{}{}
			<-reply
			return db.HolderRenewRow{}, nil
		}}
		k, c := keptCore(t, d)
		runKeeper(t, k)
		<-inCall
		tn := c.Grant("late", 0, 1, time.Second, time.Now())
		close(reply)
		synctest.Wait()
		select {
		case <-tn.Done():
			t.Fatal("a round sent before the grant ended the tenure")
		default:
		}
		<-inCall // the next round judges it
		synctest.Wait()
		select {
		case <-tn.Done():
		default:
			t.Fatal("the round after the grant did not end the tenure it did not renew")
		}
	})
}

// TestKeeperReleasesAbandoned: a tenure whose deadline passed while rounds
// failed, and that a later round renewed, is released on the server.
func TestKeeperReleasesAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		fail := true
		d := &scriptDB{}
		d.renew = func() (db.HolderRenewRow, error) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return db.HolderRenewRow{}, errNoDB
			}
			return db.HolderRenewRow{Leases: []string{"a"}, LeaseFences: []int64{3}}, nil
		}
		k, c := keptCore(t, d)
		tn := c.Grant("a", 0, 3, time.Second, time.Now())
		runKeeper(t, k)
		<-tn.Done()
		mu.Lock()
		fail = false
		mu.Unlock()
		time.Sleep(100 * time.Millisecond) // past the next retry
		synctest.Wait()
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.releases) != 1 || d.releases[0] != "a" || k.Len() != 0 {
			t.Fatalf("releases %v, Len %d; want [a], 0", d.releases, k.Len())
		}
	})
}

// TestKeeperConfigRefused: NewKeeper, and New with a Keeper, refuse
// invalid settings, naming the field.
func TestKeeperConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  KeeperConfig
		want string
	}{
		{KeeperConfig{Holder: "a\x00b"}, "Holder must not contain NUL"},
		{KeeperConfig{TTL: 25 * time.Hour}, "TTL must be from 1ms to 24h0m0s"},
		{KeeperConfig{Interval: -1}, "Interval and RetryDelay must not be negative"},
		{KeeperConfig{TTL: time.Second, Interval: time.Second}, "Interval 1s leaves no time to retry"},
		{KeeperConfig{TTL: time.Second, RetryDelay: 400 * time.Millisecond}, "RetryDelay 400ms must be shorter than Interval 333.333333ms"},
	} {
		_, err := NewKeeper(noDB{}, tc.cfg)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewKeeper(%+v) = %v, want ErrInvalidArgument saying %q", tc.cfg, err, tc.want)
		}
	}
	k, err := NewKeeper(noDB{}, KeeperConfig{Holder: "h", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Holder: "other"}, `Holder "other" differs from the Keeper's holder "h"`},
		{Config{RenewInterval: time.Second}, "RenewInterval and RetryDelay must be zero with a Keeper"},
		{Config{RetryDelay: time.Second}, "RenewInterval and RetryDelay must be zero with a Keeper"},
		{Config{SafetyMargin: 2 * time.Second}, "ttl 1s must be longer than the client's SafetyMargin 2s"},
		{Config{SafetyMargin: 650 * time.Millisecond}, "Interval 333.333333ms plus RetryDelay 66.666666ms must be shorter than its TTL minus the client's SafetyMargin (350ms)"},
	} {
		tc.cfg.Keeper = k
		if _, err := New(noDB{}, leaseKind, tc.cfg); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with %+v = %v, want ErrInvalidArgument saying %q", tc.cfg, err, tc.want)
		}
	}
}

// TestKeeperErrorSaysPrefixOnce: a round that failed reports it to the
// Renews waiting for it, saying "pglease:" once, whether the round's error
// maps to a sentinel or not.
func TestKeeperErrorSaysPrefixOnce(t *testing.T) {
	for _, tc := range []struct {
		err  error
		is   error
		want string
	}{
		{errNoDB, errNoDB, `pglease: renew_holder for holder "h", outcome unknown: noDB: no query expected`},
		{&pgconn.PgError{Severity: "ERROR", Code: "42883", Message: "function pglease.renew_holder(text, interval) does not exist"},
			ErrNotMigrated, ErrNotMigrated.Error()},
	} {
		synctest.Test(t, func(t *testing.T) {
			d := &scriptDB{renew: func() (db.HolderRenewRow, error) { return db.HolderRenewRow{}, tc.err }}
			k, c := keptCore(t, d)
			tn := c.Grant("a", 0, 7, time.Second, time.Now())
			runKeeper(t, k)
			err := tn.Renew(context.Background())
			if !errors.Is(err, tc.is) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Renew after a failed round = %v, want an error matching %v starting %q", err, tc.is, tc.want)
			}
			if n := strings.Count(err.Error(), "pglease:"); n != 1 {
				t.Fatalf("Renew after a failed round = %q: says %q %d times, want once", err, "pglease:", n)
			}
		})
	}
}
