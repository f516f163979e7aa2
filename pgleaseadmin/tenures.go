package pgleaseadmin

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// TenureRecord is one row of the tenure history (pglease.tenures,
// docs/tenure-history.md): one tenure of a lease, or of one slot of a
// scope, from its grant to its end.
type TenureRecord struct {
	// Slot is the slot number for a slot's tenure, 0 for a lease's.
	Slot int
	// Fence is the tenure's fence.
	Fence int64
	// Holder and Role are the holder string and the database role that
	// took it.
	Holder, Role string
	// Units is the units a slot's tenure held, 0 for a lease's.
	Units int
	// GrantedAt is the grant, on the server's clock.
	GrantedAt time.Time
	// EndedAt is the end (the release, or the expiry of a tenure that ran
	// out); zero while the tenure is open.
	EndedAt time.Time
	// Ended says how it ended: released, handed_over, forced, expired,
	// taken_over or purged; empty while open.
	Ended string
	// ExpiresAt is, while the tenure is open, its expiry as the lease or
	// slot row says now (in the past: it ran out and nobody has taken the
	// name since); zero once ended.
	ExpiresAt time.Time
}

// Tenures returns the tenure history of name, a lease name or a slot
// scope, on database (pglease.tenures): every tenure kept that was open
// at since or began after it (zero since: all), oldest grant first. It is
// empty for a name whose history is off (pglease.history_enable). Roles
// pglease_client and pglease_operator may call it. It returns an error
// matching pglease.ErrInvalidArgument for a name not 1 to 256 bytes.
func Tenures(ctx context.Context, database pglease.DB, name string, since time.Time) ([]TenureRecord, error) {
	if err := tenure.CheckText("name", name); err != nil {
		return nil, err
	}
	var s *time.Time
	if !since.IsZero() {
		s = &since
	}
	rows, err := db.New(database).TenureList(ctx, db.TenureListParams{Name: name, Since: s})
	return tenure.List(ctx, prefix, rows, err, func(r db.TenureListRow) TenureRecord {
		t := TenureRecord{Slot: int(r.Slot), Fence: r.Fence, Holder: r.Holder, Role: r.HolderRole,
			Units: int(r.Units), GrantedAt: r.GrantedAt, Ended: r.EndedHow}
		if r.Ended {
			t.EndedAt = r.EndedAt
		} else {
			t.ExpiresAt = r.ExpiresAt
		}
		return t
	})
}

// TenureEnds returns how many tenures with history on have ended on
// database since the schema was made, by how (the six values of
// TenureRecord.Ended, each present): counters, which purges never lower. The
// exporter's pglease_tenures_ended_total.
func TenureEnds(ctx context.Context, database pglease.DB) (map[string]int64, error) {
	rows, err := db.New(database).TenureEnds(ctx)
	if err != nil {
		return nil, interpret(ctx, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.EndedHow] = r.Tenures
	}
	return out, nil
}

// EnableHistory turns the tenure history on for the lease names and slot
// scopes starting with prefix (pglease.history_enable), keeping each row
// keep after its tenure ended. It returns the keep the prefix had, zero
// when it was off. The schema owner and superusers may call it for any
// prefix, a member of the role a prefix is bound to (pglease.prefix_bind)
// for that prefix and longer ones; others, pglease_operator included, get
// an error matching pglease.ErrPermissionDenied. A keep not more than 0 or
// over 100 years, or a prefix not 1 to 256 bytes, is
// pglease.ErrInvalidArgument.
func EnableHistory(ctx context.Context, database pglease.DB, prefix string, keep time.Duration) (time.Duration, error) {
	if err := tenure.CheckText("prefix", prefix); err != nil {
		return 0, err
	}
	if keep <= 0 {
		return 0, tenure.Invalidf("keep must be more than 0, got %v", keep)
	}
	prev, err := db.New(database).HistoryEnable(ctx, db.HistoryEnableParams{Prefix: prefix, KeepSeconds: keep.Seconds()})
	if err != nil {
		return 0, interpret(ctx, err)
	}
	return seconds(prev), nil
}

// DisableHistory turns the tenure history of prefix off
// (pglease.history_disable): rows written stay until purged. It returns
// the keep the prefix had, zero when it was off. Who may: as
// EnableHistory.
func DisableHistory(ctx context.Context, database pglease.DB, prefix string) (time.Duration, error) {
	if err := tenure.CheckText("prefix", prefix); err != nil {
		return 0, err
	}
	prev, err := db.New(database).HistoryDisable(ctx, prefix)
	if err != nil {
		return 0, interpret(ctx, err)
	}
	return seconds(prev), nil
}

// ArchiveHistory sets whether pglease.purge moves the history's old
// tenures to pglease.tenures_archive, partitioned by month (archive true),
// or deletes them (false, the default): pglease.history_archive. Tenures
// already archived stay either way. It returns the setting it replaced.
// Only the schema owner or a superuser may call it; others get an error
// matching pglease.ErrPermissionDenied.
func ArchiveHistory(ctx context.Context, database pglease.DB, archive bool) (bool, error) {
	prev, err := db.New(database).HistoryArchive(ctx, archive)
	if err != nil {
		return false, interpret(ctx, err)
	}
	return prev, nil
}

// DropHistoryBefore drops every month of pglease.tenures_archive that
// ends at or before before, each a partition at once
// (pglease.history_drop_before), and returns how many it dropped. It
// locks the archive until it returns: reads of the history and a purge
// moving rows wait, grants and renewals do not. Only the schema owner or
// a superuser may call it (else pglease.ErrPermissionDenied); a time
// later than now is pglease.ErrInvalidArgument (a month not over yet may
// still receive tenures).
func DropHistoryBefore(ctx context.Context, database pglease.DB, before time.Time) (int, error) {
	n, err := db.New(database).HistoryDropBefore(ctx, before)
	if err != nil {
		return 0, interpret(ctx, err)
	}
	return int(n), nil
}
