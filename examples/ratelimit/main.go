// Command ratelimit is an HTTP service that limits each API key with
// pglease's rate limits (docs/limits.md) and tells its clients where they
// stand with the IETF RateLimit header fields
// (draft-ietf-httpapi-ratelimit-headers-09): RateLimit-Policy says the
// policy (a burst of q requests, refilled over w seconds), RateLimit what
// is left now (r) and in how many seconds the bucket is full again (t); a
// refused request gets 429 with Retry-After. Every process serving the API
// shares each key's bucket through the database: nothing runs beside it.
//
//	DATABASE_URL=postgres://... go run ./examples/ratelimit
//	curl -si -H 'X-API-Key: acme' localhost:8080/
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/ratelimit"
)

// policy is the service's limit: 100 requests per minute per API key, at
// most 20 at once.
var policy = ratelimit.Limit{Rate: 100, Per: time.Minute, Burst: 20}

// prefix is where the keys' buckets live: prefix + API key.
const prefix = "api/"

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("PGLEASE_DATABASE_URL"), os.Getenv("DATABASE_URL")))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter, err := ratelimit.New(pool, ratelimit.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// Set once for every key under the prefix (the schema owner, or the
	// role the prefix is bound to); callers name keys, never numbers.
	if _, err := limiter.Set(ctx, prefix, policy); err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("LISTEN_ADDR"), "127.0.0.1:8080"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("serving on http://%s/\n", ln.Addr())
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	log.Fatal(http.Serve(ln, limited(limiter, policy, hello)))
}

// limited serves next only when the request's API key (X-API-Key, else
// the client's address) gets a token of its bucket, and sets the
// RateLimit fields from pglease.take's answer either way.
func limited(limiter *ratelimit.Limiter, lim ratelimit.Limit, next http.Handler) http.Handler {
	// The policy: a burst of lim.Burst, refilled in burst / rate periods.
	window := seconds(time.Duration(lim.Burst) * lim.Per / time.Duration(lim.Rate))
	policyField := fmt.Sprintf(`"default";q=%d;w=%d`, lim.Burst, window)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := r.Header.Get("X-API-Key")
		if client == "" {
			client, _, _ = net.SplitHostPort(r.RemoteAddr)
		}
		d, err := limiter.Take(r.Context(), prefix+client, 1)
		switch {
		case errors.Is(err, ratelimit.ErrNoLimit):
			http.Error(w, "no rate limit is configured for this API", http.StatusInternalServerError)
			return
		case err != nil:
			log.Printf("take %q: %v", prefix+client, err)
			http.Error(w, "rate limiter unavailable, try again", http.StatusServiceUnavailable)
			return
		}
		h := w.Header()
		h.Set("RateLimit-Policy", policyField)
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, d.Remaining, seconds(d.ResetIn)))
		if !d.Allowed {
			h.Set("Retry-After", strconv.Itoa(seconds(d.RetryIn)))
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// seconds rounds d up to whole seconds, as the fields carry them: a
// client that waits that long finds the tokens there.
func seconds(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}
