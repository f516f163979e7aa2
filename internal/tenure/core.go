package tenure

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/check"
	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/notify"
	"github.com/pglease/pglease/internal/purge"
)

// Limits enforced by the SQL functions, checked before a round trip.
const (
	// MaxNameLen is the longest lease name, holder or slot scope, in bytes.
	MaxNameLen = check.MaxLen
	// MaxTTL is the longest TTL a tenure can be granted for.
	MaxTTL = 24 * time.Hour
	// MaxCapacity is the largest capacity a slot scope can be claimed with.
	MaxCapacity = 1_000_000
	// minRetryDelay is the shortest default pause before retrying a
	// renewal whose outcome is unknown.
	minRetryDelay = 10 * time.Millisecond
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

// Config is a client's configuration, shared by both kinds (pglease.Config
// documents each field).
type Config struct {
	Holder        string
	SafetyMargin  time.Duration
	Logger        *slog.Logger
	PurgeEvery    time.Duration
	RenewInterval time.Duration
	RetryDelay    time.Duration
	StopTimeout   time.Duration
	OnStuck       func(cause error)
	OnRelease     func(err error)
	OnWait        func(refusal error)
}

// Core is a client of one kind: one holder on one database.
type Core struct {
	kind  Kind
	db    DB
	q     *db.Queries
	pool  *pgxpool.Pool // non-nil when db is a pool: it purges
	hub   *notify.Hub   // release notifications for the blocking calls
	cfg   Config        // with defaults applied
	purge time.Duration
	kept  *Keeper // keeps every tenure granted, when set (UseKeeper)

	// OnWait, when set, is called each time a blocking call has been
	// refused and is about to wait, with the name it waits on and the
	// refusal. New sets it from Config.OnWait; tests may replace it.
	OnWait func(name string, refusal error)
}

// New returns a core on database, or an error naming the invalid setting.
func New(database DB, kind Kind, cfg Config) (*Core, error) {
	if database == nil {
		return nil, Invalidf("database must not be nil: pass a *pgxpool.Pool, *pgx.Conn or pgx.Tx")
	}
	cfg.Holder = cmp.Or(cfg.Holder, NewHolderID())
	if err := CheckText("Holder", cfg.Holder); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"SafetyMargin", cfg.SafetyMargin}, {"RenewInterval", cfg.RenewInterval},
		{"RetryDelay", cfg.RetryDelay}, {"StopTimeout", cfg.StopTimeout},
	} {
		if d.v < 0 {
			return nil, Invalidf("%s must not be negative, got %s", d.name, d.v)
		}
	}
	if cfg.RenewInterval > 0 && cfg.RetryDelay >= cfg.RenewInterval {
		return nil, Invalidf("RetryDelay %s must be shorter than RenewInterval %s", cfg.RetryDelay, cfg.RenewInterval)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	c := &Core{kind: kind, db: database, q: db.New(database), cfg: cfg, purge: cmp.Or(cfg.PurgeEvery, purge.DefaultEvery)}
	c.pool, _ = database.(*pgxpool.Pool)
	c.hub = newHub(database, cfg.Logger)
	if cfg.OnWait != nil {
		c.OnWait = func(_ string, refusal error) { cfg.OnWait(refusal) }
	}
	return c, nil
}

// newHub returns a notification hub that listens on a connection of its own
// to database's server: dialled as a *pgxpool.Pool dials, or by a
// Listener; one that never listens for any other DB.
func newHub(database DB, logger *slog.Logger) *notify.Hub {
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
	if c.kept != nil && c.hub == c.kept.hub {
		return
	}
	c.hub.CloseIdle()
}

// Holder returns the identity the core holds tenures as.
func (c *Core) Holder() string { return c.cfg.Holder }

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

// CheckText validates a lease name, holder or scope as the SQL does.
func CheckText(arg, value string) error {
	if msg := check.Text(arg, value); msg != "" {
		return Invalidf("%s", msg)
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

// CheckTTL validates a TTL as the SQL does, and against the client's
// settings.
func (c *Core) CheckTTL(ttl time.Duration) error {
	if ttl < time.Microsecond || ttl > MaxTTL {
		return Invalidf("ttl must be from 1µs to %s, got %s", MaxTTL, ttl)
	}
	if c.kept != nil && ttl > c.kept.cfg.TTL {
		// A round renews to the keeper's TTL: a longer grant would be
		// shortened on the server while, should the round's reply be
		// lost, its local deadline stayed where the grant put it.
		return Invalidf("ttl %s is longer than the Keeper's TTL %s: a kept tenure is renewed to the Keeper's TTL, so ask for at most that",
			ttl, c.kept.cfg.TTL)
	}
	if c.cfg.SafetyMargin >= ttl {
		return Invalidf("ttl %s must be longer than the client's SafetyMargin %s", ttl, c.cfg.SafetyMargin)
	}
	if c.cfg.RenewInterval > 0 && c.cfg.RenewInterval >= ttl-c.marginFor(ttl) {
		return Invalidf("ttl %s leaves no time to renew: the client's RenewInterval %s must be shorter than ttl - SafetyMargin (%s)",
			ttl, c.cfg.RenewInterval, ttl-c.marginFor(ttl))
	}
	return nil
}

// marginFor returns the safety margin for a tenure of ttl.
func (c *Core) marginFor(ttl time.Duration) time.Duration {
	return cmp.Or(c.cfg.SafetyMargin, ttl/10)
}
