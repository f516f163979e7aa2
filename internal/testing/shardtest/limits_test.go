//go:build sharded

package shardtest

import (
	"testing"
)

// TestLimitsThroughProxy: rate limits through the proxy (#51): limit_set
// and limit_unset reach every partition; take decides on the partition of
// its key, each key's bucket on its own; claim_and_take runs on its
// scope's partition, where keys with the scope's routing tag are the
// buckets take reaches.
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
	var removed bool
	if err := owner.QueryRow(ctx, `SELECT pglease.limit_unset('lim')`).Scan(&removed); err != nil || !removed {
		t.Fatalf("limit_unset through the proxy: got %v, %v; want true", removed, err)
	}
	_, err := proxy.Exec(ctx, `SELECT * FROM pglease.take('lim-0')`)
	requirePgError(t, err, "PGL20", "no rate limit is set")
}
