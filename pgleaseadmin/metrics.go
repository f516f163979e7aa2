package pgleaseadmin

import (
	"cmp"
	"context"
	"math"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// DefaultMaxNames is how many names of each kind ReadMetrics and Jobs
// report at most when Filter.MaxNames is zero.
const DefaultMaxNames = 1000

// maxMaxNames and maxNamesPattern are the bounds pglease.metrics accepts.
const (
	maxMaxNames     = 1_000_000
	maxNamesPattern = 1024
)

// Filter selects the names reported one by one: the leases and slot
// scopes of ReadMetrics (whose totals count every row whatever it says),
// the jobs of Jobs.
type Filter struct {
	// Names is a POSIX regular expression (PostgreSQL's ~ operator,
	// unanchored: "^orders/" for a prefix) that names must match to be
	// reported. Empty: every name. At most 1,024 bytes.
	Names string
	// MaxNames is how many names of each kind (leases, scopes, jobs) are
	// reported at most: the first that match, in the order of the tables'
	// primary keys (the database's collation); ReadMetrics counts the
	// others in LeasesDropped and ScopesDropped. Defaults to
	// DefaultMaxNames; negative: none. At most 1,000,000.
	MaxNames int
}

// check applies f's defaults and bounds, and returns its arguments for the
// SQL functions, or an error matching pglease.ErrInvalidArgument.
func (f Filter) check() (names string, maxNames int32, err error) {
	n := cmp.Or(f.MaxNames, DefaultMaxNames)
	switch {
	case len(f.Names) > maxNamesPattern:
		return "", 0, tenure.Invalidf("Names must be at most %d bytes long, got %d bytes", maxNamesPattern, len(f.Names))
	case n > maxMaxNames:
		return "", 0, tenure.Invalidf("MaxNames must be at most %d, got %d", maxMaxNames, n)
	}
	return f.Names, int32(max(n, 0)), nil
}

// Metrics is what the server sees of a pglease database at one moment, read
// in one call (pglease.metrics): what `pglease exporter` serves.
type Metrics struct {
	// Version is the schema version (pglease.version()).
	Version string
	// Leases are the leases whose name matches Filter.Names, the
	// first MaxNames of them in the order of the primary key; LeasesDropped
	// counts those that matched beyond.
	Leases        []LeaseMetric
	LeasesDropped int64
	// Scopes are the slot scopes likewise; ScopesDropped counts those that
	// matched beyond.
	Scopes        []ScopeMetric
	ScopesDropped int64
	// LeaseStates and SlotStates count every lease row and every slot row
	// by state.
	LeaseStates StateCounts
	SlotStates  StateCounts
	// LeaseWaiters and SlotWaiters are the refused acquires and claims
	// registered as waiting for a release, whose wait has not ended.
	LeaseWaiters int64
	SlotWaiters  int64
	// Tables are pglease's tables that hold rows (leases first; the list
	// pglease.metrics documents) with their row counts and sizes.
	Tables []TableMetric
	// LeaseOldestFree is how long the lease free (released or expired) for
	// the longest has been free, zero when none is; a purge with a free-for
	// time below it would delete that lease. ScopeOldestFree is the same
	// for slot scopes, free when all their slots are.
	LeaseOldestFree time.Duration
	ScopeOldestFree time.Duration
	// PurgedRows counts the rows purge has deleted since the schema was
	// installed.
	PurgedRows int64
}

// LeaseMetric is one lease in Metrics.
type LeaseMetric struct {
	// Name is the lease name.
	Name string
	// Held is true for a live tenure.
	Held bool
	// Expiry is the tenure's end minus the server's now: positive while
	// held (the time left), zero or negative once the tenure ended by
	// expiry or release (how long ago). Unlike LeaseStatus.ExpiresIn it
	// does not stop at zero.
	Expiry time.Duration
	// Fence is the current or last tenure's fence; it only grows, so its
	// increase over a time is the number of tenures that began in it.
	Fence int64
}

// ScopeMetric is one slot scope in Metrics.
type ScopeMetric struct {
	// Scope is the scope's name.
	Scope string
	// InUse is the number of live holders.
	InUse int
	// Capacity is the smallest capacity a live holder claimed with (what
	// admits the next claim), else the capacity of the scope's latest
	// claim, else 0 (slots claimed before schema 0.2.0 carry none).
	Capacity int
}

// StateCounts counts rows by State.
type StateCounts struct {
	// Held, Expired and Free are the numbers of rows in each State.
	Held, Expired, Free int64
}

// TableMetric is one of pglease's tables in Metrics.
type TableMetric struct {
	// Name is the table's name in schema pglease.
	Name string
	// Rows is its exact row count.
	Rows int64
	// Bytes is its size on disk with indexes and TOAST.
	Bytes int64
}

// ReadMetrics reads in one call what the server sees of database now:
// each lease and slot scope selected by f, and totals over every row.
// It reads only, takes no lock a holder waits for, and needs role
// pglease_client (pglease.ErrPermissionDenied without it) and schema
// 0.3.0 or later (pglease.ErrNotMigrated before). A Names that is not a
// valid regular expression, or out-of-range options, are
// pglease.ErrInvalidArgument.
func ReadMetrics(ctx context.Context, database pglease.DB, f Filter) (Metrics, error) {
	names, maxNames, err := f.check()
	if err != nil {
		return Metrics{}, err
	}
	r, err := db.New(database).Metrics(ctx, db.MetricsParams{Names: names, MaxNames: maxNames})
	if err != nil {
		return Metrics{}, interpret(ctx, err)
	}
	m := Metrics{
		Version:         r.Version,
		Leases:          make([]LeaseMetric, len(r.LeaseNames)),
		LeasesDropped:   r.LeasesDropped,
		Scopes:          make([]ScopeMetric, len(r.ScopeNames)),
		ScopesDropped:   r.ScopesDropped,
		LeaseStates:     StateCounts{Held: r.LeasesHeld, Expired: r.LeasesExpired, Free: r.LeasesFree},
		SlotStates:      StateCounts{Held: r.SlotsHeld, Expired: r.SlotsExpired, Free: r.SlotsFree},
		LeaseWaiters:    r.LeaseWaiters,
		SlotWaiters:     r.SlotWaiters,
		Tables:          make([]TableMetric, len(r.Tables)),
		LeaseOldestFree: seconds(r.LeaseOldestFreeSeconds),
		ScopeOldestFree: seconds(r.ScopeOldestFreeSeconds),
		PurgedRows:      r.PurgedRows,
	}
	for i, name := range r.LeaseNames {
		m.Leases[i] = LeaseMetric{Name: name, Held: r.LeaseHeld[i], Expiry: seconds(r.LeaseExpirySeconds[i]), Fence: r.LeaseFences[i]}
	}
	for i, scope := range r.ScopeNames {
		m.Scopes[i] = ScopeMetric{Scope: scope, InUse: int(r.ScopeInUse[i]), Capacity: int(r.ScopeCapacities[i])}
	}
	for i, name := range r.Tables {
		m.Tables[i] = TableMetric{Name: name, Rows: r.TableRows[i], Bytes: r.TableBytes[i]}
	}
	return m, nil
}

// seconds converts the server's seconds (microsecond precision) to a
// duration.
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s*1e6)) * time.Microsecond
}
