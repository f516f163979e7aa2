//go:build differential

// Package differential compares head's SQL functions with those of an
// earlier commit: the same random calls, from two client roles, on two
// databases that start alike, must return the same results and leave the
// same rows. It is the proof that a rewrite of sql/functions changed no
// decision: make test-differential BASE=<commit before the rewrite>.
package differential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// side is one database: the base's functions or head's, with a connection
// per client role and one as the owner.
type side struct {
	name  string
	owner *pgx.Conn
	roles [2]*pgx.Conn
}

// call is one function call, made alike on both sides.
type call struct {
	what string
	role int // -1: the owner
	sql  string
	args []any
}

// TestSameDecisions runs seeds of random calls on both sides and compares
// every result and, after each call, the tables.
func TestSameDecisions(t *testing.T) {
	base := os.Getenv("PGLEASE_DIFF_BASE")
	if base == "" {
		t.Fatal("PGLEASE_DIFF_BASE is not set: name the commit whose functions head's are compared with (make test-differential BASE=<commit>)")
	}
	calls, _ := strconv.Atoi(cmpOr(os.Getenv("PGLEASE_DIFF_CALLS"), "1500"))
	ctx := t.Context()
	adminURL := pgtest.AdminURL(t)
	roleNames := [2]string{uniqueRole(), uniqueRole()}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })

	baseURL := pgtest.NewDatabase(t)
	if err := applyBase(ctx, t, baseURL, base); err != nil {
		t.Fatalf("base %s: %v", base, err)
	}
	headURL := pgtest.NewDatabase(t)
	if err := schema.Up(ctx, headURL); err != nil {
		t.Fatalf("head: %v", err)
	}
	for _, r := range roleNames {
		if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN IN ROLE pglease_client`, r)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, u := range []string{baseURL, headURL} {
				if c, err := pgx.Connect(context.Background(), u); err == nil {
					_, _ = c.Exec(context.Background(), `DROP OWNED BY `+r)
					_ = c.Close(context.Background())
				}
			}
			if _, err := admin.Exec(context.Background(), `DROP ROLE `+r); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		})
	}
	sides := [2]*side{open(t, "base", baseURL, roleNames), open(t, "head", headURL, roleNames)}
	if a, b := tables(t, sides[0]), tables(t, sides[1]); a != b {
		t.Fatalf("the two schemas' tables differ, so their functions cannot be compared:\nbase %s\nhead %s", a, b)
	}
	warp := warpSQL(t, sides[1])

	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 50))
		for i := range calls {
			c := next(rng, t, sides[1], warp)
			var got [2]string
			for k, s := range sides {
				got[k] = run(t, s, c)
			}
			if !same(got[0], got[1]) {
				t.Fatalf("seed %d call %d %s %v:\nbase %s\nhead %s", seed, i, c.what, c.args, got[0], got[1])
			}
			for k, s := range sides {
				got[k] = state(t, s)
			}
			if !same(got[0], got[1]) {
				t.Fatalf("seed %d call %d %s %v: the tables differ after it:\nbase %s\nhead %s", seed, i, c.what, c.args, got[0], got[1])
			}
		}
		for _, s := range sides {
			if _, err := s.owner.Exec(ctx, `TRUNCATE pglease.leases, pglease.slots, pglease.slot_scopes, pglease.slot_queue, pglease.waiters, pglease.candidates, pglease.observers`); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d seeds of %d calls: the same results and rows on %s and head", 3, calls, base)
}

// applyBase installs the migrations of commit base, in order, from git.
func applyBase(ctx context.Context, t *testing.T, url, base string) error {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "git", "-C", root, "ls-tree", "--name-only", base, "migrations/").Output()
	if err != nil {
		return fmt.Errorf("git ls-tree %s migrations/: %w (is it a commit of this repository?)", base, err)
	}
	var ups []string
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, ".up.sql") {
			ups = append(ups, f)
		}
	}
	slices.Sort(ups)
	if len(ups) == 0 {
		return fmt.Errorf("no migrations at %s", base)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, f := range ups {
		sql, err := exec.CommandContext(ctx, "git", "-C", root, "show", base+":"+f).Output()
		if err != nil {
			return fmt.Errorf("git show %s:%s: %w", base, f, err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	t.Logf("base: %d migrations of %s", len(ups), base)
	return nil
}

func open(t *testing.T, name, url string, roles [2]string) *side {
	s := &side{name: name, owner: connect(t, url, "")}
	for i, r := range roles {
		s.roles[i] = connect(t, url, r)
	}
	return s
}

func connect(t *testing.T, url, user string) *pgx.Conn {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		cfg.User = user
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("connect as %q: %v", user, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// tables describes the columns of schema pglease's tables.
func tables(t *testing.T, s *side) string {
	var out string
	if err := s.owner.QueryRow(t.Context(), `
		SELECT string_agg(c.table_name || '.' || c.column_name || ' ' || c.data_type, ', '
		                  ORDER BY c.table_name, c.column_name)
		FROM information_schema.columns AS c
		JOIN information_schema.tables AS t USING (table_schema, table_name)
		WHERE c.table_schema = 'pglease' AND t.table_type = 'BASE TABLE'`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// warpSQL returns the statement that moves every time in the tables back
// by $1 seconds: time passing, the same on both sides.
func warpSQL(t *testing.T, s *side) string {
	rows, err := s.owner.Query(t.Context(), `
		SELECT c.table_name, string_agg(format('%I = %I - make_interval(secs => $1)', c.column_name, c.column_name), ', ')
		FROM information_schema.columns AS c
		JOIN information_schema.tables AS t USING (table_schema, table_name)
		WHERE c.table_schema = 'pglease' AND t.table_type = 'BASE TABLE' AND c.data_type = 'timestamp with time zone'
		GROUP BY c.table_name ORDER BY c.table_name`)
	if err != nil {
		t.Fatal(err)
	}
	var stmts []string
	for rows.Next() {
		var table, set string
		if err := rows.Scan(&table, &set); err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, fmt.Sprintf("UPDATE pglease.%s SET %s", pgx.Identifier{table}.Sanitize(), set))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(stmts, ";\n")
}

var (
	leases  = []string{"d/1", "d/2", "d/3"}
	holders = []string{"a", "b", "c"}
	scopes  = []string{"s/1", "s/2"}
	ttls    = []string{"10 minutes", "1 hour"}
	values  = []any{nil, "v1", "v2"}
)

// next draws a call. Holders and fences are mostly taken from the rows
// (head's; both sides have the same), so that calls hit live tenures.
func next(rng *rand.Rand, t *testing.T, s *side, warp string) call {
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	role := rng.IntN(2)
	// rows reads the rows to choose from, in a fixed order.
	rows := func(sql string) [][]any {
		r, err := s.owner.Query(t.Context(), sql)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(r, func(row pgx.CollectableRow) ([]any, error) { return row.Values() })
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	lease := func() (string, string, int64) {
		rs := rows(`SELECT name, coalesce(holder, 'a'), fence FROM pglease.leases ORDER BY name`)
		if len(rs) == 0 || rng.IntN(4) == 0 {
			return pick(leases), pick(holders), int64(rng.IntN(4))
		}
		r := rs[rng.IntN(len(rs))]
		return r[0].(string), r[1].(string), r[2].(int64)
	}
	slot := func() (string, int32, string, int64) {
		rs := rows(`SELECT scope, slot::integer, coalesce(holder, 'a'), fence::bigint FROM pglease.slots ORDER BY scope, slot`)
		if len(rs) == 0 || rng.IntN(4) == 0 {
			return pick(scopes), int32(1 + rng.IntN(3)), pick(holders), int64(rng.IntN(4))
		}
		r := rs[rng.IntN(len(rs))]
		return r[0].(string), r[1].(int32), r[2].(string), r[3].(int64)
	}
	switch k := rng.IntN(16); k {
	case 0, 1:
		return call{what: "acquire", role: role, sql: `SELECT to_jsonb(r) FROM pglease.acquire($1, $2, $3::interval) AS r`,
			args: []any{pick(leases), pick(holders), pick(ttls)}}
	case 2:
		return call{what: "acquire with a value", role: role, sql: `SELECT to_jsonb(r) FROM pglease.acquire($1, $2, $3::interval, $4) AS r`,
			args: []any{pick(leases), pick(holders), pick(ttls), values[rng.IntN(len(values))]}}
	case 3:
		n, h, f := lease()
		return call{what: "renew", role: role,
			sql:  `SELECT to_jsonb(r) FROM pglease.renew($1, $2, $3, $4::interval) AS r`,
			args: []any{n, h, f, pick(ttls)}}
	case 4:
		n, h, f := lease()
		return call{what: "renew_lease", role: role,
			sql:  `SELECT to_jsonb(r) FROM pglease.renew_lease($1, $2, $3, $4::interval) AS r`,
			args: []any{n, h, f, pick(ttls)}}
	case 5:
		n, h, f := lease()
		return call{what: "release", role: role, sql: `SELECT to_jsonb(r) FROM pglease.release($1, $2, $3) AS r`, args: []any{n, h, f}}
	case 6:
		n, h, f := lease()
		return call{what: "set_value", role: role, sql: `SELECT to_jsonb(r) FROM pglease.set_value($1, $2, $3, $4) AS r`,
			args: []any{n, h, f, values[rng.IntN(len(values))]}}
	case 7:
		return call{what: "request_release", role: -1, sql: `SELECT to_jsonb(r) FROM pglease.request_release($1, $2, $3::interval) AS r`,
			args: []any{pick(leases), []any{nil, "a", "b"}[rng.IntN(3)], pick(ttls)}}
	case 8:
		return call{what: "renew_holder", role: role, sql: `SELECT to_jsonb(r) FROM pglease.renew_holder($1, $2::interval) AS r`,
			args: []any{pick(holders), pick(ttls)}}
	case 9:
		names := []string{pick(leases), pick(leases)}
		return call{what: "acquire_batch", role: role, sql: `SELECT to_jsonb(r) FROM pglease.acquire_batch($1, $2, $3::interval[], $4) AS r`,
			args: []any{names, pick(holders), []string{pick(ttls), pick(ttls)}, []any{values[rng.IntN(3)], values[rng.IntN(3)]}}}
	case 10:
		n1, h, f1 := lease()
		n2, _, f2 := lease()
		return call{what: "release_batch", role: role, sql: `SELECT to_jsonb(r) FROM pglease.release_batch($1, $2, $3) AS r`,
			args: []any{[]string{n1, n2}, h, []int64{f1, f2}}}
	case 11:
		return call{what: "claim_slot", role: role, sql: `SELECT to_jsonb(r) FROM pglease.claim_slot($1, $2, $3, $4::interval, $5) AS r`,
			args: []any{pick(scopes), pick(holders), int32(1 + rng.IntN(3)), pick(ttls), int32(1 + rng.IntN(2))}}
	case 12:
		sc, n, h, f := slot()
		return call{what: "renew_slot", role: role, sql: `SELECT to_jsonb(r) FROM pglease.renew_slot($1, $2, $3, $4, $5::interval) AS r`,
			args: []any{sc, n, h, f, pick(ttls)}}
	case 13:
		sc, n, h, f := slot()
		return call{what: "release_slot", role: role, sql: `SELECT to_jsonb(r) FROM pglease.release_slot($1, $2, $3, $4) AS r`,
			args: []any{sc, n, h, f}}
	case 14:
		return call{what: "force_release", role: -1, sql: `SELECT to_jsonb(r) FROM pglease.force_release($1) AS r`, args: []any{pick(leases)}}
	default:
		return call{what: "time passes", role: -1, sql: warp, args: []any{float64([]int{300, 1800, 3660}[rng.IntN(3)])}}
	}
}

// run makes c on s and returns its result as JSON with times made
// relative to the call's own clock, or the SQLSTATE it raised.
func run(t *testing.T, s *side, c call) string {
	conn := s.owner
	if c.role >= 0 {
		conn = s.roles[c.role]
	}
	sql := c.sql
	if c.what == "time passes" {
		for _, stmt := range strings.Split(sql, ";\n") {
			if _, err := conn.Exec(t.Context(), stmt, c.args...); err != nil {
				t.Fatalf("%s: %s: %v", s.name, stmt, err)
			}
		}
		return "{}"
	}
	var out []byte
	var now time.Time
	err := conn.QueryRow(t.Context(), `SELECT x.r::text::bytea, clock_timestamp() FROM (`+sql+`) AS x(r)`, c.args...).Scan(&out, &now)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return "error " + pgErr.Code
	}
	if err != nil {
		t.Fatalf("%s: %s: %v", s.name, c.what, err)
	}
	return relative(t, out, now)
}

// state dumps the tables the calls change, times relative to now.
func state(t *testing.T, s *side) string {
	var out []byte
	var now time.Time
	if err := s.owner.QueryRow(t.Context(), `
		SELECT jsonb_build_object(
		  'leases', (SELECT jsonb_agg(to_jsonb(l) - 'created_by' ORDER BY l.name) FROM pglease.leases AS l),
		  'slots', (SELECT jsonb_agg(to_jsonb(l) - 'created_by' ORDER BY l.scope, l.slot) FROM pglease.slots AS l),
		  'scopes', (SELECT jsonb_agg(to_jsonb(l) ORDER BY l.scope) FROM pglease.slot_scopes AS l),
		  'waiters', (SELECT jsonb_agg(jsonb_build_array(w.kind, w.name, w.caller_role, w.until) ORDER BY w.kind, w.name, w.caller_role) FROM pglease.waiters AS w),
		  'candidates', (SELECT jsonb_agg(jsonb_build_array(c.name, c.holder, c.holder_role, c.until) ORDER BY c.name, c.holder, c.holder_role) FROM pglease.candidates AS c)
		)::text::bytea, clock_timestamp()`).Scan(&out, &now); err != nil {
		t.Fatal(err)
	}
	return relative(t, out, now)
}

var clockText = regexp.MustCompile(`^-?(\d+ days? )?-?\d+:\d\d:\d\d(\.\d+)?$`)

// relative rewrites a JSON document: every timestamp becomes its distance
// from now in seconds, every interval its length in seconds, both as
// numbers that same compares within a tolerance.
func relative(t *testing.T, doc []byte, now time.Time) string {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		case string:
			if ts, err := time.Parse("2006-01-02T15:04:05.999999-07:00", x); err == nil {
				return map[string]any{"t": ts.Sub(now).Seconds()}
			}
			if clockText.MatchString(x) {
				return map[string]any{"d": intervalSeconds(x)}
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// intervalSeconds reads an interval's text (days and a clock) in seconds.
func intervalSeconds(s string) float64 {
	var days float64
	if i := strings.Index(s, " day"); i >= 0 {
		days, _ = strconv.ParseFloat(s[:i], 64)
		s = s[strings.Index(s, " ")+1:]
		s = s[strings.Index(s, " ")+1:]
	}
	neg := strings.HasPrefix(s, "-")
	parts := strings.Split(strings.TrimPrefix(s, "-"), ":")
	h, _ := strconv.ParseFloat(parts[0], 64)
	m, _ := strconv.ParseFloat(parts[1], 64)
	sec, _ := strconv.ParseFloat(parts[2], 64)
	v := h*3600 + m*60 + sec
	if neg {
		v = -v
	}
	return days*86400 + v
}

// same compares two outputs of relative: equal but for times, which may
// differ by a second (the two sides' calls are milliseconds apart; every
// decision in these runs is minutes from its boundary).
func same(a, b string) bool {
	if a == b {
		return true
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return near(x, y)
}

func near(x, y any) bool {
	switch a := x.(type) {
	case map[string]any:
		b, ok := y.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, e := range a {
			f, ok := b[k]
			if !ok {
				return false
			}
			if (k == "t" || k == "d") && len(a) == 1 {
				u, ok1 := e.(float64)
				v, ok2 := f.(float64)
				return ok1 && ok2 && math.Abs(u-v) < 1
			}
			if !near(e, f) {
				return false
			}
		}
		return true
	case []any:
		b, ok := y.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !near(a[i], b[i]) {
				return false
			}
		}
		return true
	default:
		return x == y
	}
}

func uniqueRole() string {
	return fmt.Sprintf("pglease_diff_%d", rand.Uint64()%1_000_000_000)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
