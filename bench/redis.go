package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// redisUnlock is the compare-and-delete of Redis's documented single-
// instance lock: delete the key only if it still holds this client's
// token.
var redisUnlock = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// redisLock is the lock Redis documents for one instance: SET key token NX
// PX ttl to take it, the compare-and-delete script to give it back, through
// go-redis with a pool of C connections, each client on a key of its own.
// Both are writes: with appendfsync always, each is in the AOF and fsynced
// before its reply.
func (e *env) redisLock(s *store) workload {
	return workload{
		key: redisKey, name: "Redis SET NX + compare-and-delete", path: "Redis " + s.version + ": SET NX PX + EVALSHA, appendfsync always",
		steps: []string{"set", "delete"},
		start: func(ctx context.Context, n int) (*instance, error) {
			cli := redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: n, MinIdleConns: n})
			if err := redisUnlock.Load(ctx, cli).Err(); err != nil {
				_ = cli.Close()
				return nil, fmt.Errorf("load the unlock script: %w", err)
			}
			inst := &instance{cycles: make([][]step, n), serverTicks: s.cpuTicks, close: func() { _ = cli.Close() }}
			for i := range n {
				key, token := id(redisKey, i), fmt.Sprintf("bench-%d", i)
				lock := func(ctx context.Context) error {
					ok, err := cli.SetNX(ctx, key, token, cycleTTL).Result()
					if err == nil && !ok {
						err = errRefused("SET NX " + key)
					}
					return err
				}
				unlock := func(ctx context.Context) error {
					n, err := redisUnlock.Run(ctx, cli, []string{key}, token).Int()
					if err == nil && n != 1 {
						err = fmt.Errorf("compare-and-delete %s: deleted %d keys, want 1", key, n)
					}
					return err
				}
				inst.cycles[i] = []step{lock, unlock}
			}
			return inst, nil
		},
	}
}
