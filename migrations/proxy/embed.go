// Package proxy embeds the golang-migrate migrations of a pglease proxy
// database: the pglease functions and views, each run by PL/Proxy on the
// partition that owns its name or scope. They are generated from the
// sources in sql/functions/ and sql/proxy/ by scripts/gen-proxy.sh.
package proxy

import "embed"

// FS holds the migration files (NNNNNN_name.up.sql / .down.sql).
//
//go:embed *.sql
var FS embed.FS
