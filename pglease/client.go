package pglease

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/check"
	"github.com/pglease/pglease/internal/db"
)

// Limits enforced by the SQL functions, checked here before a round trip.
const (
	// MaxNameLen is the longest lease name, holder or slot scope, in bytes.
	MaxNameLen = check.MaxLen
	// MaxTTL is the longest TTL a lease or slot can be granted for.
	MaxTTL = 24 * time.Hour
)

// DB is what a Client runs its queries on. A *pgxpool.Pool, a *pgx.Conn and
// a pgx.Tx all satisfy it. Only a *pgxpool.Pool lets Acquire wake up on
// release notifications (it takes a connection to LISTEN on); with the others
// Acquire waits until the holder's reported expiry.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Config configures a Client. The zero value is usable: zero fields mean
// their defaults.
type Config struct {
	// Holder identifies this client in the lease table. Two clients with the
	// same holder share tenures (acquire is re-entrant per holder), so it must
	// be unique per client. Defaults to NewHolderID().
	Holder string

	// SafetyMargin is subtracted from a lease's TTL to compute its local
	// deadline (see Lease.Deadline). It covers clock-rate differences between
	// this machine and the server and the time between a check of the
	// deadline and the work it guards. Defaults to a tenth of each lease's
	// TTL. Must be smaller than every TTL used with this client.
	SafetyMargin time.Duration
}

// Client acquires leases in the pglease schema of one database. It is safe
// for concurrent use.
type Client struct {
	db     DB
	q      *db.Queries
	pool   *pgxpool.Pool // non-nil when db is a pool: used to LISTEN
	holder string
	margin time.Duration

	// waiting, when set by a test, is called each time a blocking acquire
	// has been refused and is about to wait.
	waiting func(name string)
}

// New returns a Client that runs its queries on database. It does not take
// ownership: closing database stays the caller's job.
func New(database DB, cfg Config) (*Client, error) {
	if database == nil {
		return nil, invalidf("database must not be nil: pass a *pgxpool.Pool, *pgx.Conn or pgx.Tx")
	}
	holder := cmp.Or(cfg.Holder, NewHolderID())
	if err := checkText("holder", holder); err != nil {
		return nil, err
	}
	if cfg.SafetyMargin < 0 {
		return nil, invalidf("SafetyMargin must not be negative, got %s", cfg.SafetyMargin)
	}
	c := &Client{db: database, q: db.New(database), holder: holder, margin: cfg.SafetyMargin}
	if pool, ok := database.(*pgxpool.Pool); ok {
		c.pool = pool
	}
	return c, nil
}

// Holder returns the identity this client acquires leases as.
func (c *Client) Holder() string { return c.holder }

// NewHolderID returns a holder identity unique to this call:
// "host/pid/random". The random part keeps two processes apart even when they
// share a host name and PID (two containers that both run as PID 1).
func NewHolderID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	if len(host) > 200 {
		host = host[:200]
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// marginFor returns the safety margin for a lease of ttl.
func (c *Client) marginFor(ttl time.Duration) time.Duration {
	return cmp.Or(c.margin, ttl/10)
}

// checkText validates a lease name, holder or scope as the SQL does.
func checkText(arg, value string) error {
	if msg := check.Text(arg, value); msg != "" {
		return invalidf("%s", msg)
	}
	return nil
}

// checkTTL validates a TTL as the SQL does, and against the safety margin.
func (c *Client) checkTTL(ttl time.Duration) error {
	if ttl < time.Microsecond || ttl > MaxTTL {
		return invalidf("ttl must be from 1µs to %s, got %s", MaxTTL, ttl)
	}
	if c.margin >= ttl {
		return invalidf("ttl %s must be longer than the client's SafetyMargin %s", ttl, c.margin)
	}
	return nil
}
