package tenure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/notify"
)

// Limits enforced by the SQL functions, checked before a round trip.
const (
	// MaxNameLen is the longest lease name, holder or slot scope, in bytes.
	MaxNameLen = 256
	// MaxTTL is the longest TTL a tenure can be granted for.
	MaxTTL = 24 * time.Hour
	// MaxCapacity is the largest capacity a slot scope can be claimed with.
	MaxCapacity = 1_000_000
)

// DB is what a client runs its queries on: a *pgxpool.Pool, a *pgx.Conn or
// a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Listener is a DB that can open a dedicated connection for release
// notifications (pglease.Listener documents it).
type Listener interface {
	ListenConn(ctx context.Context) (*pgx.Conn, error)
}

// Kind is what differs between leases and slots in the words of the
// core: names, sentinels and the error Run returns on a loss.
type Kind struct {
	// Noun is "lease" or "slot": the kind in notifications and logs.
	Noun string
	// Prefix starts the kind's error messages: "pglease" or "runslots".
	Prefix string
	// Lost is the kind's lost sentinel: ErrLeaseLost or ErrSlotLost.
	Lost error
	// LostError returns the error Run reports when the tenure was lost
	// while the workload ran.
	LostError func(t *Tenure, cause, workErr error) error
}

// Core is a client of one kind: one holder on one database.
type Core struct {
	kind Kind
	db   DB
	q    *db.Queries
	pool *pgxpool.Pool // non-nil when db is a pool: it purges
	hub  *notify.Hub   // release notifications for the blocking calls
	cfg  Config        // with defaults applied
	m    *meters       // its instruments, made once

	// unsure holds the releases whose outcome is unknown, until
	// ConfirmReleases confirms them.
	unsure unsureReleases

	// legacyUntil is when to try 0.3.0's leadership functions again after
	// one was missing (Unix nanoseconds; 0: never missing). See Modern.
	legacyUntil atomic.Int64

	// OnWait, when set, is called each time a blocking call has been
	// refused and is about to wait, with the name it waits on and the
	// refusal. New sets it from Config.OnWait; tests may replace it.
	OnWait func(name string, refusal error)

	// ReleaseLease, when set, releases a lease where the release may
	// commit asynchronously (see asyncrelease) instead of
	// LeaseReleaseAsync, with the same result: pglease's client sets it to
	// coalesce concurrent releases (package coalesce).
	ReleaseLease func(ctx context.Context, name string, fence int64) (bool, error)
}

// New returns a core on database, or an error naming the invalid setting.
// With cfg.Keeper, every tenure it grants is kept by the keeper, and its
// blocking calls wait on the keeper's LISTEN connection when the keeper's
// database can listen: every client of a keeper shares it.
func New(database DB, kind Kind, cfg Config) (*Core, error) {
	if database == nil {
		return nil, Invalidf("database must not be nil: pass a *pgxpool.Pool, *pgx.Conn or pgx.Tx")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	c := &Core{kind: kind, db: database, q: db.New(database), cfg: cfg, m: newMeters(cfg.MeterProvider, kind.Noun, cfg.MetricsByName)}
	c.pool, _ = database.(*pgxpool.Pool)
	c.hub = NewHub(database, cfg.Logger)
	if k := cfg.Keeper; k != nil && k.hub.Listens() {
		c.hub = k.hub
	}
	if cfg.OnWait != nil {
		c.OnWait = func(_ string, refusal error) { cfg.OnWait(refusal) }
	}
	return c, nil
}

// NewHub returns a notification hub that listens on a connection of its own
// to database's server: dialled as a *pgxpool.Pool dials, or by a
// Listener; one that never listens for any other DB.
func NewHub(database DB, logger *slog.Logger) *notify.Hub {
	var dial notify.Dial
	switch d := database.(type) {
	case *pgxpool.Pool:
		dial = notify.DialPool(d)
	case Listener:
		dial = d.ListenConn
	}
	return notify.NewHub(dial, notify.DefaultLinger, logger)
}

// CloseIdle closes the core's LISTEN connection now if no call waits on
// it; a keeper's shared connection stays open.
func (c *Core) CloseIdle() {
	if k := c.cfg.Keeper; k != nil && c.hub == k.hub {
		return
	}
	c.hub.CloseIdle()
}

// Holder returns the identity the core holds tenures as.
func (c *Core) Holder() string { return c.cfg.Holder }

// Listen subscribes to the notifications of the core's kind about name
// (releases and, for an observed lease, changes) on the core's hub.
func (c *Core) Listen(ctx context.Context, name string) *notify.Waiter {
	return c.hub.Listen(ctx, c.kind.Noun, name)
}

// ListenChanges subscribes to 'changed' events of lease name (a release
// request among them), not to its releases.
func (c *Core) ListenChanges(ctx context.Context, name string) *notify.Waiter {
	return c.hub.ListenChanges(ctx, name)
}

// Logger returns the core's logger.
func (c *Core) Logger() *slog.Logger { return c.cfg.Logger }

// Queries returns the generated queries on the core's database.
func (c *Core) Queries() *db.Queries { return c.q }

// Interpret maps err from a generated query with the core's kind.
func (c *Core) Interpret(ctx context.Context, err error) error {
	return Interpret(ctx, c.kind.Prefix, c.kind.Lost, err)
}

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

// CheckText validates a lease name, holder or scope named arg as the SQL
// does, plus what Postgres text cannot hold, before a round trip.
func CheckText(arg, value string) error {
	switch n := len(value); {
	case n < 1 || n > MaxNameLen:
		return Invalidf("%s must be 1 to %d bytes long, got %d bytes", arg, MaxNameLen, n)
	case !utf8.ValidString(value):
		return Invalidf("%s must be valid UTF-8", arg)
	case strings.IndexByte(value, 0) >= 0:
		return Invalidf("%s must not contain NUL bytes (Postgres text cannot hold them)", arg)
	}
	return nil
}

// CheckCapacity validates a slot capacity as the SQL does.
func CheckCapacity(arg string, capacity int) error {
	if capacity < 1 || capacity > MaxCapacity {
		return Invalidf("%s must be from 1 to %d, got %d", arg, MaxCapacity, capacity)
	}
	return nil
}

// CheckClaim validates a slot claim (a runslots.Want, called arg) as the
// SQL does: its scope, its capacity, and its units, 0 meaning 1.
func CheckClaim(arg, scope string, capacity, units int) error {
	if err := CheckText(arg+".Scope", scope); err != nil {
		return err
	}
	if err := CheckCapacity(arg+".Capacity", capacity); err != nil {
		return err
	}
	if units < 0 || max(units, 1) > capacity {
		return Invalidf("%s.Units must be from 1 to %s.Capacity (%d), got %d", arg, arg, capacity, units)
	}
	return nil
}

// CheckTTL validates a TTL as the SQL does, and against the client's
// settings (Config.CheckTTL).
func (c *Core) CheckTTL(ttl time.Duration) error { return c.cfg.CheckTTL("ttl", ttl) }
