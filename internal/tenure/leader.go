package tenure

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// retryModern is how long a core keeps to the functions of schemas before
// 0.3.0 after one of 0.3.0's leadership functions was missing, before it
// tries that function again (the schema may have been upgraded meanwhile).
const retryModern = time.Minute

// Modern reports whether to call 0.3.0's leadership functions (the
// four-argument acquire, renew_lease): true unless one was found missing
// in the last retryModern, as on a schema of an earlier release (a
// rollout that upgrades the clients first, or a downgrade).
func (c *Core) Modern() bool {
	until := c.legacyUntil.Load()
	return until == 0 || time.Now().UnixNano() >= until
}

// Missing reports whether err says that a function is missing (42883),
// and if so makes Modern false for retryModern: the caller then calls
// the function of the earlier schema instead.
func (c *Core) Missing(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok || pgErr.Code != undefinedFunc {
		return false
	}
	c.legacyUntil.Store(time.Now().Add(retryModern).UnixNano())
	return true
}

// isUndefinedColumn reports whether err is the server's 42703: a view of a
// schema before the column's.
func isUndefinedColumn(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == undefinedColumn
}
