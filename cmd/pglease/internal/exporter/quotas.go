package exporter

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// seriesPerQuota: limit and used per cap.
const seriesPerQuota = 2

// quotaUsageSQL reads every cap the schema owner set with its use
// (pglease.quota_usage, granted to pglease_client; docs/security.md#quotas).
// No pgleaseadmin function or sqlc query reads it yet; when one does, the
// exporter should call that instead.
const quotaUsageSQL = `SELECT q.role_name, q.kind, q.max_rows::bigint, q.used
FROM pglease.quota_usage() AS q
ORDER BY q.role_name, q.kind`

// quotaUsage is one cap: role and kind, its maximum and the rows counted
// against it (up to max + 1).
type quotaUsage struct {
	role, kind string
	max, used  int64
}

// readQuotas returns the first limit caps in the order of role and kind,
// and how many more there are. ok is false when there is nothing to
// export: a schema without pglease.quota_usage (SQLSTATE 42883), quietly,
// or a failed read, logged; pglease_up says the database was read.
func (e *Exporter) readQuotas(ctx context.Context, limit int) (quotas []quotaUsage, dropped int64, ok bool) {
	rows, err := e.db.Query(ctx, quotaUsageSQL)
	if err == nil {
		for rows.Next() {
			if len(quotas) == limit {
				dropped++
				continue
			}
			var q quotaUsage
			if err = rows.Scan(&q.role, &q.kind, &q.max, &q.used); err != nil {
				break
			}
			quotas = append(quotas, q)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "42883" { // undefined_function: a schema before quotas
			e.opts.Log.Warn("pglease exporter: read the quotas", "err", err)
		}
		return nil, 0, false
	}
	return quotas, dropped, true
}

// writeQuotas writes the caps' series: per role and kind, the cap and its
// use. The schema owner sets the caps, so they are few; --max-series
// bounds them all the same.
func writeQuotas(w *textWriter, quotas []quotaUsage) {
	w.family("pglease_quota_limit_rows", "gauge",
		"The most rows of the kind the role may have, as the schema owner capped it with pglease.quota_set.")
	for _, q := range quotas {
		w.sampleInt("pglease_quota_limit_rows", q.max, label{"role", q.role}, label{"kind", q.kind})
	}
	w.family("pglease_quota_used_rows", "gauge",
		"The role's rows of the kind, counted up to its cap plus one: cap + 1 means over the cap (lowered below the rows it had).")
	for _, q := range quotas {
		w.sampleInt("pglease_quota_used_rows", q.used, label{"role", q.role}, label{"kind", q.kind})
	}
}
