package tenure

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// Releases whose outcome is unknown.
//
// A release that failed without an answer from the server (a timeout, a
// cut connection) may still reach the server later. Had the holder
// meanwhile acquired the same lease (or claimed the same scope) again while
// the server still had the old tenure, the grant would have re-pinned that
// tenure, with the same fence, and the late release would end it while the
// holder believes it holds it (model/lease.pml, REORDER). So a core
// remembers each such release, and before it acquires that name again it
// confirms them: it sends each again and waits for the server's answer.
// Once the old tenure has ended on the server, a grant has a larger fence,
// which a late release cannot match. A remembered release stays until it
// is confirmed.
type unsureReleases struct {
	n  atomic.Int32 // how many are remembered: the fast path reads only this
	mu sync.Mutex
	by map[string][]*Tenure // by lease name or slot scope
}

// remember records t's release, which failed with err, when the server may
// not have answered it: an error from the server itself (a *pgconn.PgError)
// means the statement failed and changed nothing.
func (u *unsureReleases) remember(t *Tenure, err error) {
	if _, answered := errors.AsType[*pgconn.PgError](err); answered {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.by == nil {
		u.by = map[string][]*Tenure{}
	}
	if slices.Contains(u.by[t.name], t) {
		return
	}
	u.by[t.name] = append(u.by[t.name], t)
	u.n.Add(1)
}

// ConfirmReleases confirms every remembered release of a tenure of name
// (see unsureReleases): it sends each again, synchronously, and forgets it
// once the server answered, whatever the answer (released, or over
// already). It returns the first error, interpreted, leaving that release
// remembered: the caller's acquire or claim fails with it, as it would
// have on the same connection trouble. Call it before every acquire or
// claim of name.
func (c *Core) ConfirmReleases(ctx context.Context, name string) error {
	u := &c.unsure
	if u.n.Load() == 0 {
		return nil
	}
	u.mu.Lock()
	pending := append([]*Tenure(nil), u.by[name]...)
	u.mu.Unlock()
	for _, t := range pending {
		if _, err := t.release(ctx, false); err != nil {
			return c.Interpret(ctx, err)
		}
		u.mu.Lock()
		if i := slices.Index(u.by[name], t); i >= 0 { // a concurrent call may have confirmed it
			u.by[name] = slices.Delete(u.by[name], i, i+1)
			if len(u.by[name]) == 0 {
				delete(u.by, name)
			}
			u.n.Add(-1)
		}
		u.mu.Unlock()
	}
	return nil
}
