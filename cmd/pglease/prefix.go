package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

var prefixCommand = &command{
	name:    "prefix",
	summary: "Bind a name prefix to a role, unbind it, or list the bound prefixes (schema owner)",
	usage: `
Usage: pglease prefix bind PREFIX ROLE [--database URL]
       pglease prefix unbind PREFIX [--database URL]
       pglease prefix list [--json] [--database URL]

  bind    binds PREFIX to ROLE (pglease.prefix_bind): from then on only
          members of ROLE take a lease, claim a slot scope or create a
          shard group whose name starts with PREFIX; other roles are
          refused (SQLSTATE 42501). The longest bound prefix of a name
          decides. Tenures live now run on until they end (end one with
          pglease release --force). Binding a bound prefix again moves it
          to ROLE. ROLE is spelled as in pg_roles, unquoted; exit status 1
          when no such role exists.
  unbind  makes the names under PREFIX shared again, as far as no other
          bound prefix covers them (pglease.prefix_unbind). Nothing to do
          when it was not bound.
  list    lists the bound prefixes, by prefix, with their role and when
          each was bound (server clock).

All three need the owner of schema pglease: no role is granted them
(docs/security.md, "Names a role owns"). Any client sees whose each lease
is in pglease status (OWNER), or asks pglease.owner_of(NAME).

With --json, list prints one JSON object, whose shape is stable:

  {"prefixes": [{"prefix": "billing/", "role": "billing_svc",
                 "bound_at": "2025-01-02T03:04:05.678Z"}]}

sorted by prefix, and empty, not null, when none is bound.`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			db     dbFlag
			asJSON bool
		)
		db.register(fs)
		fs.BoolVar(&asJSON, "json", false, "with list: print JSON (shape in 'pglease help prefix')")
		return func(ctx context.Context, args []string) error {
			if len(args) == 0 {
				return usagef("prefix", "want bind PREFIX ROLE, unbind PREFIX or list")
			}
			action, args := args[0], args[1:]
			if asJSON && action != "list" {
				return usagef("prefix", "--json is for list")
			}
			switch action {
			case "bind":
				if len(args) != 2 {
					return usagef("prefix", "bind wants PREFIX and ROLE")
				}
				return a.prefixBind(ctx, &db, args[0], args[1])
			case "unbind":
				if len(args) != 1 {
					return usagef("prefix", "unbind wants one PREFIX")
				}
				return a.prefixUnbind(ctx, &db, args[0])
			case "list":
				if len(args) != 0 {
					return usagef("prefix", "list takes no arguments, got %q", args)
				}
				return a.prefixList(ctx, &db, asJSON)
			}
			return usagef("prefix", "unknown action %q: want bind, unbind or list", action)
		}
	},
}

// prefixError explains a failed prefix call, what naming it ("prefix
// bind"): the library's own words for a role that is not the schema owner
// or a role that does not exist, a usage error for a bad argument.
func (a *app) prefixError(ctx context.Context, what string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, pglease.ErrInvalidArgument):
		return usagef("prefix", "%s", detail(err))
	case errors.Is(err, pgleaseadmin.ErrUnknownRole), errors.Is(err, pglease.ErrPermissionDenied):
		return failf("%s: %s", what, detail(err))
	}
	return a.queryError(ctx, what, err)
}

func (a *app) prefixBind(ctx context.Context, db *dbFlag, prefix, role string) error {
	pool, err := a.open(ctx, db, "prefix")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	previous, err := pgleaseadmin.BindPrefix(ctx, pool, prefix, role)
	switch {
	case err != nil:
		return a.prefixError(ctx, "prefix bind", err)
	case previous == "":
		fmt.Fprintf(a.stdout, "bound prefix %q to role %s\n", prefix, cell(role))
	case previous == role:
		fmt.Fprintf(a.stdout, "bound prefix %q to role %s (it was already)\n", prefix, cell(role))
	default:
		fmt.Fprintf(a.stdout, "bound prefix %q to role %s (it was bound to role %s)\n", prefix, cell(role), cell(previous))
	}
	return nil
}

func (a *app) prefixUnbind(ctx context.Context, db *dbFlag, prefix string) error {
	pool, err := a.open(ctx, db, "prefix")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	previous, err := pgleaseadmin.UnbindPrefix(ctx, pool, prefix)
	switch {
	case err != nil:
		return a.prefixError(ctx, "prefix unbind", err)
	case previous == "":
		fmt.Fprintf(a.stdout, "prefix %q was not bound: nothing to do\n", prefix)
	default:
		fmt.Fprintf(a.stdout, "unbound prefix %q from role %s: its names are shared again\n", prefix, cell(previous))
	}
	return nil
}

// prefixesJSON is the output of prefix list --json.
type prefixesJSON struct {
	Prefixes []prefixJSON `json:"prefixes"`
}

type prefixJSON struct {
	Prefix  string    `json:"prefix"`
	Role    string    `json:"role"`
	BoundAt time.Time `json:"bound_at"`
}

func (a *app) prefixList(ctx context.Context, db *dbFlag, asJSON bool) error {
	pool, err := a.open(ctx, db, "prefix")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	ps, err := pgleaseadmin.Prefixes(ctx, pool)
	if err != nil {
		return a.prefixError(ctx, "prefix list", err)
	}
	out := prefixesJSON{Prefixes: make([]prefixJSON, 0, len(ps))}
	for _, p := range ps {
		out.Prefixes = append(out.Prefixes, prefixJSON{Prefix: p.Prefix, Role: p.Role, BoundAt: p.BoundAt.UTC()})
	}
	if asJSON {
		return a.printJSON(out)
	}
	return printPrefixes(a.stdout, out)
}

// printPrefixes prints the bound prefixes as a table.
func printPrefixes(w io.Writer, ps prefixesJSON) error {
	if len(ps.Prefixes) == 0 {
		_, err := fmt.Fprintln(w, "No bound prefixes.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PREFIX\tROLE\tBOUND AT")
	for _, p := range ps.Prefixes {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(p.Prefix), cell(p.Role), p.BoundAt.Format(time.RFC3339))
	}
	return tw.Flush()
}
