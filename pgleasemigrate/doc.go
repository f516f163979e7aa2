// Package pgleasemigrate applies, and reverts, the schema pglease's clients
// need: what an operator or a deploy step runs once, kept apart from the
// client packages a service imports (pglease, runslots, supervisor), the
// way River keeps rivermigrate apart from river.
//
// # Overview
//
//	if err := pgleasemigrate.Up(ctx, databaseURL); err != nil {
//		log.Fatal(err)
//	}
//
// Up applies the migrations embedded in this build: schema pglease, its
// functions and views, and role pglease_client when missing and allowed.
// Each migration runs in its own transaction, and the history is kept in
// [Table], apart from an application's own golang-migrate history
// (schema_migrations). Down removes everything Up made. `pglease migrate
// up` and `pglease migrate down --yes` do the same from the command line;
// the stock migrate CLI can apply the same files (migrations/) with
// x-migrations-table=pglease_schema_migrations.
//
// ProxyUp and ProxyDown install the schema of a PL/Proxy proxy database,
// which runs each call on the partition database that owns its lease name
// or slot scope (docs/scaling.md); the partitions themselves get Up.
//
// # Safety
//
// Up is safe to run on every deploy: applying an up-to-date database does
// nothing, and concurrent runs are serialised by golang-migrate's advisory
// lock. Leases and slots are renewed through an upgrade and keep their
// fences. Before upgrading, Up checks the schema it upgrades: one changed
// by hand is refused with an error naming what differs, and nothing is
// changed (the history is not left dirty).
//
// Down drops schema pglease with every lease, slot and fence: the next
// tenure of a name starts again from fence 1, so a resource that checks
// fences would accept stale writers. Run it only when no client uses the
// database. A database where pglease was installed with CREATE EXTENSION
// pglease has no migration history: change it with ALTER or DROP
// EXTENSION instead.
//
// # Failure handling
//
// A migration that fails half-way leaves the history dirty (golang-migrate's
// rule); Up then refuses to run until the schema is repaired by hand and
// the version set in [Table]. Every function takes a context and stops
// between migrations when it ends, returning ctx.Err().
package pgleasemigrate
