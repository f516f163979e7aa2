//go:build sharded

package shardtest

import (
	"testing"
)

// TestLimitsThroughProxy: rate limits through the proxy (#51): limit_set
// and limit_unset reach every partition; take decides on the partition of
// its key, each key's bucket on its own; claim_and_take runs on its
// scope's partition, where keys with the scope's routing tag are the
// buckets take reaches. reserve_all is decided on its keys' partition
// when they share a routing key, and refused (22023, nothing reserved
// anywhere) when they do not: all or nothing holds within one partition.
func TestLimitsThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	owner := pool(t, s.ProxyURL, "")
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "limits"))
	ctx := testContext(t)
	for _, target := range []string{"lim", "{t}/"} {
		var replaced bool
		if err := owner.QueryRow(ctx, `SELECT pglease.limit_set($1, 1, '1 hour', 2)`, target).Scan(&replaced); err != nil || replaced {
			t.Fatalf("limit_set(%q) through the proxy: got %v, %v; want false (new on every partition)", target, replaced, err)
		}
	}
	for p := range 4 {
		key := namesOn(t, proxy, "lim", p, 1)[0]
		for i, want := range []bool{true, true, false} {
			var allowed bool
			if err := proxy.QueryRow(ctx, `SELECT allowed FROM pglease.take($1)`, key).Scan(&allowed); err != nil || allowed != want {
				t.Fatalf("take %d of %s on partition %d: got %v, %v; want %v", i+1, key, p, allowed, err, want)
			}
		}
	}
	var claimed bool
	if err := proxy.QueryRow(ctx, `SELECT claimed FROM pglease.claim_and_take('{t}/gpu', 'h', 2, '1 minute', 1,
			ARRAY['{t}/user/1'], ARRAY[2])`).Scan(&claimed); err != nil || !claimed {
		t.Fatalf("claim_and_take through the proxy: got %v, %v; want claimed", claimed, err)
	}
	var allowed bool
	if err := proxy.QueryRow(ctx, `SELECT allowed FROM pglease.take('{t}/user/1')`).Scan(&allowed); err != nil || allowed {
		t.Fatalf("take of the key claim_and_take emptied: got %v, %v; want refused (the same bucket)", allowed, err)
	}
	// reserve_all over keys of one routing tag: one partition decides it,
	// settle through any of its keys reaches it.
	var (
		reserved    bool
		reservation int64
	)
	if err := proxy.QueryRow(ctx, `SELECT reserved, reservation FROM pglease.reserve_all(ARRAY['{t}/user/2', '{t}/'], 2, '1 minute')`).
		Scan(&reserved, &reservation); err != nil || !reserved {
		t.Fatalf("reserve_all of one tag through the proxy: got %v, %v; want reserved", reserved, err)
	}
	if err := proxy.QueryRow(ctx, `SELECT allowed FROM pglease.take('{t}/')`).Scan(&allowed); err != nil || allowed {
		t.Fatalf("take of the tenant key reserve_all emptied: got %v, %v; want refused (the same bucket)", allowed, err)
	}
	var settled bool
	if err := proxy.QueryRow(ctx, `SELECT settled FROM pglease.settle('{t}/', $1, 0)`, reservation).Scan(&settled); err != nil || !settled {
		t.Fatalf("settle through the proxy by the tenant key: got %v, %v; want settled", settled, err)
	}
	// Keys of different routing keys, maybe on different partitions:
	// refused before any partition is reached.
	_, err := proxy.Exec(ctx, `SELECT * FROM pglease.reserve_all(ARRAY['{t}/user/3', 'lim-1'], 1, '1 minute')`)
	requirePgError(t, err, "22023", "pglease.reserve_all: keys", "routed by different keys")
	for _, key := range []string{"{t}/user/3", "lim-1"} {
		var spent bool
		if err := proxy.QueryRow(ctx, `SELECT NOT allowed OR remaining < 2 FROM pglease.peek($1)`, key).Scan(&spent); err != nil || spent {
			t.Fatalf("%s after the refused reserve_all: spent=%v, %v; want full", key, spent, err)
		}
	}
	var removed bool
	if err := owner.QueryRow(ctx, `SELECT pglease.limit_unset('lim')`).Scan(&removed); err != nil || !removed {
		t.Fatalf("limit_unset through the proxy: got %v, %v; want true", removed, err)
	}
	_, err = proxy.Exec(ctx, `SELECT * FROM pglease.take('lim-0')`)
	requirePgError(t, err, "PGL20", "no rate limit is set")
}
