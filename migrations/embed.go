// Package migrations embeds pglease's golang-migrate migrations, which are
// generated from the sources in sql/ by `make generate`.
package migrations

import "embed"

// FS holds the migration files (NNNNNN_name.up.sql / .down.sql).
//
//go:embed *.sql
var FS embed.FS
