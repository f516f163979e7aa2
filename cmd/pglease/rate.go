package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/ratelimit"
)

// rateOptions are pglease run's rate-limit flags (docs/limits.md).
type rateOptions struct {
	key  string // --rate: "" when not set
	cost int    // --cost
}

// registerRateFlags adds the rate-limit flags of pglease run to fs.
func registerRateFlags(fs *flag.FlagSet, o *runOptions) {
	fs.StringVar(&o.rate.key, "rate", "",
		"run COMMAND only when a token of rate-limit `KEY` is granted (pglease.take); refused: skip, or wait with --wait")
	fs.IntVar(&o.rate.cost, "cost", 1, "with --rate: take `N` tokens at once, all or none; 1 to the key's burst")
}

// checkRateFlags refuses the rate-limit flags' bad values and
// combinations; set holds the flags given.
func checkRateFlags(o *runOptions, set map[string]bool) error {
	switch {
	case set["rate"] && o.rate.key == "":
		return usagef("run", "--rate is empty: give the key of a rate limit (pglease.limit_set sets one for it or a prefix)")
	case len(o.rate.key) > ratelimit.MaxKeyLen:
		return usagef("run", "--rate KEY must be at most %d bytes, got %d bytes", ratelimit.MaxKeyLen, len(o.rate.key))
	case set["cost"] && o.rate.key == "":
		return usagef("run", "--cost needs --rate KEY: the key whose tokens it takes")
	case o.rate.cost < 1:
		return usagef("run", "--cost must be a whole number of at least 1, got %d", o.rate.cost)
	}
	return nil
}

// takeRate takes --cost tokens of --rate KEY before the command starts:
// nil when granted; when refused, the skip (exit --skip-status, 0 by
// default), or with --wait it waits for them on the client (holding no
// connection) and takes again.
func (r *runner) takeRate(ctx context.Context) error {
	key, cost := r.o.rate.key, r.o.rate.cost
	l, err := ratelimit.New(r.pool, ratelimit.Config{})
	if err != nil {
		return usagef("run", "%s", detail(err))
	}
	d, err := l.Take(ctx, key, cost)
	if err == nil && !d.Allowed {
		if !r.o.wait {
			return r.skip(fmt.Sprintf("rate limit %s refused %d tokens (%d left): retry in %s",
				quoteName(key), cost, d.Remaining, d.RetryIn.Round(time.Millisecond)))
		}
		fmt.Fprintf(r.a.stderr, "pglease: waiting %s for %d tokens of rate limit %s (%d left; --wait)\n",
			d.RetryIn.Round(time.Millisecond), cost, quoteName(key), d.Remaining)
		err = l.WaitN(ctx, key, cost)
	}
	if err != nil {
		return r.rateError(ctx, key, cost, err)
	}
	r.log.Info("rate token taken", "key", key, "cost", cost)
	return nil
}

// rateError explains a failure to take tokens of key.
func (r *runner) rateError(ctx context.Context, key string, cost int, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	what := fmt.Sprintf("take %d tokens of rate limit %s", cost, quoteName(key))
	switch {
	case errors.Is(err, ratelimit.ErrNoLimit):
		return failf("%s: no rate limit is set for the key or a prefix of it; hint: set one, e.g. "+
			"SELECT pglease.limit_set('%s', 10, '1 minute', 10) (the schema owner, or the role owning the key's prefix)", what, sqlQuote(key))
	case errors.Is(err, ratelimit.ErrCostExceedsBurst):
		return usagef("run", "--cost %d is more than the burst of rate limit %s: it could never be granted; "+
			"lower --cost, or raise the burst (pglease.limit_set)", cost, quoteName(key))
	case errors.Is(err, pglease.ErrPermissionDenied):
		return failf("%s: permission denied: %s; hint: the key is under a prefix bound to another role: "+
			"run as a member of that role, or use a key of your own", what, detail(err))
	case errors.Is(err, pglease.ErrInvalidArgument):
		return usagef("run", "--rate %s: %s", quoteName(key), detail(err))
	}
	return r.a.queryError(ctx, what, err)
}

// sqlQuote doubles the single quotes of s, for a SQL literal in a hint.
func sqlQuote(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(out)
}
