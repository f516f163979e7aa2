package supervisor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/runslots"
	"github.com/pglease/pglease/supervisor"
)

// shared is the settings a supervisor shares with a client.
type shared struct {
	holder                     string
	margin, renew, retry, stop time.Duration
	keeper                     *pglease.Keeper
}

// TestSharedRules: a field the supervisor shares with the clients follows
// one rule: pglease.New, runslots.New and supervisor.New refuse the same
// settings with the same words, and a TTL that leaves no room for them is
// refused by the supervisor as by an acquire or a claim.
func TestSharedRules(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	k, err := pglease.NewKeeper(pool, pglease.KeeperConfig{Holder: "k", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    shared
		ttl  time.Duration // 0: refused by New; else by a grant of ttl
		want string
	}{
		{"holder with NUL", shared{holder: "a\x00b"}, 0, "Holder must not contain NUL"},
		{"negative margin", shared{margin: -time.Second}, 0, "SafetyMargin must not be negative"},
		{"negative stop timeout", shared{stop: -time.Second}, 0, "StopTimeout must not be negative"},
		{"retry after renew", shared{renew: time.Second, retry: time.Second}, 0, "RetryDelay 1s must be shorter than RenewInterval 1s"},
		{"renew interval with a keeper", shared{renew: time.Second, keeper: k}, 0, "RenewInterval and RetryDelay must be zero with a Keeper"},
		{"retry delay with a keeper", shared{retry: time.Second, keeper: k}, 0, "RenewInterval and RetryDelay must be zero with a Keeper"},
		{"other holder than the keeper's", shared{holder: "h", keeper: k}, 0, `Holder "h" differs from the Keeper's holder "k"`},
		{"margin leaving the keeper no room", shared{margin: 1900 * time.Millisecond, keeper: k}, 0, "the Keeper's"},
		{"retry after the default renew", shared{retry: 400 * time.Millisecond}, time.Second,
			"RetryDelay 400ms must be shorter than the RenewInterval 333.333333ms"},
		{"renew past the margin", shared{renew: 950 * time.Millisecond}, time.Second, "leaves no time to renew: the RenewInterval 950ms"},
		{"margin over the ttl", shared{margin: time.Second}, time.Second, "must be longer than the client's SafetyMargin 1s"},
	} {
		s := tc.s
		lcfg := pglease.Config{Holder: s.holder, SafetyMargin: s.margin, RenewInterval: s.renew, RetryDelay: s.retry, StopTimeout: s.stop, Keeper: s.keeper}
		scfg := runslots.Config{Holder: s.holder, SafetyMargin: s.margin, RenewInterval: s.renew, RetryDelay: s.retry, StopTimeout: s.stop, Keeper: s.keeper}
		sup := supervisor.Config{TTL: tc.ttl, Holder: s.holder, SafetyMargin: s.margin,
			RenewInterval: s.renew, RetryDelay: s.retry, StopTimeout: s.stop, Keeper: s.keeper}
		leases, lerr := pglease.New(pool, lcfg)
		slots, serr := runslots.New(pool, scfg)
		if tc.ttl != 0 {
			if lerr != nil || serr != nil {
				t.Fatalf("%s: New = %v, %v; want the clients built", tc.name, lerr, serr)
			}
			_, lerr = leases.TryAcquire(ctx, "rules", tc.ttl)
			_, serr = slots.TryClaim(ctx, runslots.Want{Scope: "rules", Capacity: 1}, tc.ttl)
		}
		_, err := supervisor.NewLease(pool, "rules", sup)
		for who, err := range map[string]error{"pglease": lerr, "runslots": serr, "supervisor": err} {
			if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %s refused with %v, want ErrInvalidArgument saying %q", tc.name, who, err, tc.want)
			}
		}
	}
}
