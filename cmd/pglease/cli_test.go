//go:build unix

package main

import (
	"encoding/json"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

// cliCase is one feature's test of the binary.
type cliCase struct {
	name string
	run  func(t *testing.T, c cli)
}

// TestCLI builds the binary once and drives it as a user would, one
// parallel subtest per feature.
func TestCLI(t *testing.T) {
	base := cli{bin: binary(t)}
	for _, tc := range append([]cliCase{
		{"Usage", testUsage},
		{"Migrate", testMigrate},
		{"Status", testStatus},
		{"RunExitCodes", testRunExitCodes},
		{"RunRenews", testRunRenews},
		{"RunForwardsSignals", testRunForwardsSignals},
		{"RunNoWaitAndWait", testRunNoWaitAndWait},
		{"RunLeaseLostRefused", testRunLeaseLostRefused},
		{"Release", testRelease},
		{"RunCronFlags", testRunCronFlags},
		{"RunOncePer", testRunOncePer},
		{"Tenures", testTenures},
		{"ReleaseRequest", testReleaseRequest},
		{"Demo", testDemo},
		{"DemoDiscovery", testDemoDiscovery},
		{"Errors", testErrors},
		{"NoPasswordInOutput", testNoPasswordInOutput},
		{"Exporter", testExporter},
		{"ExporterErrors", testExporterErrors},
		{"Prefix", testPrefix},
		{"Help", testHelp},
		{"Version", testVersion},
		{"GlobalFlags", testGlobalFlags},
		{"MigratePrivileges", testMigratePrivileges},
		{"NoDatabaseNamed", testNoDatabaseNamed},
		{"ScopeFullCapacity", testScopeFullCapacity},
		{"RunRate", testRunRate},
		{"RunRateErrors", testRunRateErrors},
	}, reaperCases...) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := base
			c.t = t
			tc.run(t, c)
		})
	}
}

func testUsage(t *testing.T, c cli) {
	r := c.mustRun(0, "help")
	requireContains(t, "help", r.stdout, "migrate", "status", "run", "release", "exporter", "demo", "PGLEASE_DATABASE_URL", "75", "69")
	r = c.mustRun(0, "help", "exporter")
	requireContains(t, "help exporter", r.stdout, "--listen", "--names", "--max-series", "--timeout", "pglease_client", "docs/observability.md")
	r = c.mustRun(0, "run", "-h")
	requireContains(t, "run -h", r.stdout, "Usage: pglease run", "--grace", "--no-wait", "PGLEASE_FENCE", "69", "75")
	r = c.mustRun(0, "help", "status")
	requireContains(t, "help status", r.stdout, "expires_in_ms", "--json")
	c.mustRun(2)

	for _, args := range [][]string{
		{"bogus"},
		{"run", "--", "true"},
		{"run", "--lease", "x"},
		{"run", "--lease", "x", "--wait", "--no-wait", "--", "true"},
		{"run", "--slot", "no-capacity", "--", "true"},
		{"run", "--slot", "s:0", "--", "true"},
		{"run", "--slot", "s:2", "--units", "0", "--", "true"},
		{"run", "--slot", "s:2", "--units", "3", "--", "true"},
		{"run", "--lease", "x", "--units", "2", "--", "true"},
		{"run", "--lease", "x", "--ttl", "0s", "--", "true"},
		{"run", "--lease", "x", "--ttl", "6s", "--grace", "3001ms", "--", "true"},
		{"run", "--bogus", "--", "true"},
		{"migrate"},
		{"migrate", "sideways"},
		{"migrate", "down"},
		{"release", "x", "--yes"},
		{"release", "--force", "--yes"},
		{"release", "--request", "--force", "x"},
		{"release", "--request", "--yes", "x"},
		{"release", "--to", "h", "x"},
		{"release", "--request", "--to", "h", "--reserve", "2h", "x"},
		{"status", "--bogus"},
		{"status", "extra"},
		{"demo", "--ttl", "1ns"},
	} {
		r := c.mustRun(2, args...)
		requireOneLine(t, "stderr of pglease "+strings.Join(args, " "), r.stderr)
	}
	r = c.mustRun(2, "migrate", "down")
	requireContains(t, "migrate down without --yes", r.stderr, "--yes")
	r = c.mustRun(2, "run", "--lease", "", "--", "true")
	requireContains(t, "run --lease ''", r.stderr, "--lease is empty")
	r = c.mustRun(2, "run", "--slot", "", "--", "true")
	requireContains(t, "run --slot ''", r.stderr, "--slot is empty")
	r = c.mustRun(2, "run", "--slot", strings.Repeat("s", 300), "--", "true")
	requireContains(t, "run --slot with a long bad value", r.stderr, "(300 bytes)")
	if strings.Contains(r.stderr, strings.Repeat("s", 100)) {
		t.Fatalf("a long --slot is echoed in full: %q", r.stderr)
	}
}

func testMigrate(t *testing.T, c cli) {
	url := pgtest.NewDatabase(t)
	pgtest.LockRoleDrops(t) // migrate down drops the role where it can
	env := c.with("PGLEASE_DATABASE_URL=" + url)
	if r := env.mustRun(0, "migrate", "version"); r.stdout != "0\n" {
		t.Fatalf("version of a fresh database: got %q, want 0", r.stdout)
	}
	latest := strconv.Itoa(int(schema.Latest()))
	r := env.mustRun(0, "migrate", "up")
	requireContains(t, "migrate up", r.stdout, "from version 0 to "+latest)
	r = env.mustRun(0, "migrate", "up")
	requireContains(t, "migrate up again", r.stdout, "up to date at version "+latest)
	// The --database flag and DATABASE_URL name the database too.
	if r := c.mustRun(0, "migrate", "version", "--database", url); r.stdout != latest+"\n" {
		t.Fatalf("version after up: got %q, want %s", r.stdout, latest)
	}
	if r := c.with("DATABASE_URL="+url).mustRun(0, "migrate", "version"); r.stdout != latest+"\n" {
		t.Fatalf("version with DATABASE_URL: got %q, want %s", r.stdout, latest)
	}
	// Down to the release and up again, keeping leases.
	r = env.mustRun(0, "migrate", "goto", "1")
	requireContains(t, "migrate goto 1", r.stdout, "from version "+latest+" to 1")
	env.mustRun(2, "migrate", "goto", "99")
	r = env.mustRun(0, "migrate", "up")
	requireContains(t, "migrate up from 1", r.stdout, "from version 1 to "+latest)
	r = env.mustRun(0, "purge", "--free-for", "0s")
	requireContains(t, "purge", r.stdout, "purged 0 rows free for at least 0s")
	env.mustRun(2, "purge", "--free-for", "-1s")
	env.mustRun(0, "status")
	env.mustRun(2, "migrate", "down")
	r = env.mustRun(0, "migrate", "down", "--yes")
	requireContains(t, "migrate down --yes", r.stdout, "from version "+latest+" to 0")
	if r := env.mustRun(0, "migrate", "version"); r.stdout != "0\n" {
		t.Fatalf("version after down: got %q, want 0", r.stdout)
	}
	r = env.mustRun(1, "status")
	requireContains(t, "status after down", r.stderr, "schema pglease not found")
}

// statusOutput is the documented shape of status --json.
type statusOutput struct {
	Leases []struct {
		Name        string    `json:"name"`
		Holder      *string   `json:"holder"`
		Fence       int64     `json:"fence"`
		State       string    `json:"state"`
		ExpiresAt   time.Time `json:"expires_at"`
		ExpiresInMS int64     `json:"expires_in_ms"`
		ExpiresIn   string    `json:"expires_in"`
		// Leadership (docs/leadership.md).
		Value            *string `json:"value"`
		ReleaseRequested bool    `json:"release_requested"`
		PreferredHolder  *string `json:"preferred_holder"`
		// Names a role owns (pglease prefix).
		Owner *string `json:"owner"`
	} `json:"leases"`
	Slots []struct {
		Scope       string    `json:"scope"`
		Slot        int       `json:"slot"`
		Holder      *string   `json:"holder"`
		Fence       int64     `json:"fence"`
		State       string    `json:"state"`
		ExpiresAt   time.Time `json:"expires_at"`
		ExpiresInMS int64     `json:"expires_in_ms"`
		ExpiresIn   string    `json:"expires_in"`
	} `json:"slots"`
	Scopes []struct {
		Scope string `json:"scope"`
		InUse int    `json:"in_use"`
		Slots int    `json:"slots"`
	} `json:"scopes"`
	Jobs   []json.RawMessage `json:"jobs"`
	Groups []struct {
		Name    string `json:"name"`
		Role    string `json:"role"`
		Shards  int    `json:"shards"`
		Unowned int    `json:"unowned"`
		Members []struct {
			Member      string    `json:"member"`
			Shards      int       `json:"shards"`
			HandingOver int       `json:"handing_over"`
			MaxShards   *int      `json:"max_shards"`
			ExpiresAt   time.Time `json:"expires_at"`
		} `json:"members"`
	} `json:"groups"`
	Limits []struct {
		Target       string  `json:"target"`
		Exact        bool    `json:"exact"`
		Rate         int     `json:"rate"`
		Per          string  `json:"per"`
		Burst        int     `json:"burst"`
		Owner        *string `json:"owner"`
		Buckets      int64   `json:"buckets"`
		Limited      int64   `json:"limited"`
		MinRemaining int     `json:"min_remaining"`
		Used         int     `json:"used"`
		Reserved     int64   `json:"reserved"`
	} `json:"limits"`
	LimitsLeftOut int64 `json:"limits_left_out"`
}

// readStatus runs status --json and decodes it strictly.
func readStatus(t *testing.T, c cli) statusOutput {
	t.Helper()
	r := c.mustRun(0, "status", "--json")
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	var out statusOutput
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decode status --json: %v\n%s", err, r.stdout)
	}
	return out
}

func testStatus(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	ctx := t.Context()

	// An empty database: empty arrays, not null.
	r := c.mustRun(0, "status", "--json")
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"leases", "slots", "scopes", "jobs", "limits"} {
		if string(raw[key]) != "[]" {
			t.Fatalf("status --json of an empty database: %s is %s, want []", key, raw[key])
		}
	}

	pool := pgtest.Pool(t, url)
	leases, err := pglease.New(pool, pglease.Config{Holder: "test-holder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.TryAcquire(ctx, "held-lease", time.Minute); err != nil {
		t.Fatal(err)
	}
	l, err := leases.TryAcquire(ctx, "freed-lease", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	slots, err := runslots.New(pool, runslots.Config{Holder: "test-holder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slots.TryClaim(ctx, runslots.Want{Scope: "scope-a", Capacity: 2}, time.Minute); err != nil {
		t.Fatal(err)
	}

	st := readStatus(t, c)
	if len(st.Leases) != 2 || st.Leases[0].Name != "freed-lease" || st.Leases[1].Name != "held-lease" {
		t.Fatalf("leases: got %+v, want freed-lease and held-lease by name", st.Leases)
	}
	free, held := st.Leases[0], st.Leases[1]
	if free.Holder != nil || free.State != "free" || free.Fence != 1 || free.ExpiresInMS != 0 || free.ExpiresIn != "0s" {
		t.Fatalf("freed lease: got %+v, want holder null, free, fence 1, 0 ms left", free)
	}
	if held.Holder == nil || *held.Holder != "test-holder" || held.State != "held" || held.Fence != 1 {
		t.Fatalf("held lease: got %+v, want held by test-holder with fence 1", held)
	}
	if held.ExpiresInMS <= 50_000 || held.ExpiresInMS > 60_000 {
		t.Fatalf("held lease: expires_in_ms %d, want in (50000, 60000]", held.ExpiresInMS)
	}
	if d, err := time.ParseDuration(held.ExpiresIn); err != nil || d.Milliseconds() != held.ExpiresInMS {
		t.Fatalf("held lease: expires_in %q (%v) does not match expires_in_ms %d", held.ExpiresIn, err, held.ExpiresInMS)
	}
	if time.Until(held.ExpiresAt) < 30*time.Second {
		t.Fatalf("held lease: expires_at %v, want about a minute from now", held.ExpiresAt)
	}
	if len(st.Slots) != 1 || st.Slots[0].Scope != "scope-a" || st.Slots[0].Slot != 1 || st.Slots[0].Holder == nil ||
		*st.Slots[0].Holder != "test-holder" || st.Slots[0].State != "held" || st.Slots[0].Fence != 1 || st.Slots[0].ExpiresInMS <= 50_000 {
		t.Fatalf("slots: got %+v, want slot 1 of scope-a held by test-holder", st.Slots)
	}
	if len(st.Scopes) != 1 || st.Scopes[0].Scope != "scope-a" || st.Scopes[0].InUse != 1 || st.Scopes[0].Slots != 1 {
		t.Fatalf("scopes: got %+v, want scope-a with 1 in use of 1 slot", st.Scopes)
	}

	r = c.mustRun(0, "status")
	requireContains(t, "status", r.stdout, "LEASE", "EXPIRES IN", "held-lease", "test-holder", "held", "freed-lease", "free", "scope-a", "IN USE")

	// A shard group: its member with the shards it owns, and the unowned.
	if _, err := pool.Exec(ctx, `SELECT pglease.group_create('outbox', 4, NULL), pglease.group_sync('outbox', 'w1', '1 minute', 3)`); err != nil {
		t.Fatal(err)
	}
	st = readStatus(t, c)
	if len(st.Groups) != 1 || st.Groups[0].Name != "outbox" || st.Groups[0].Shards != 4 || st.Groups[0].Unowned != 1 ||
		len(st.Groups[0].Members) != 1 || st.Groups[0].Members[0].Member != "w1" || st.Groups[0].Members[0].Shards != 3 ||
		st.Groups[0].Members[0].MaxShards == nil || *st.Groups[0].Members[0].MaxShards != 3 {
		t.Fatalf("groups: got %+v, want outbox (4 shards) with w1 owning 3 (max 3) and 1 unowned", st.Groups)
	}
	r = c.mustRun(0, "status")
	requireContains(t, "status", r.stdout, "GROUP", "outbox", "w1", "(unowned)")

	// Rate limits: a rate limit with one key empty and one spent in part,
	// and a budget with a reservation.
	if _, err := pool.Exec(ctx, `SELECT pglease.limit_set('api/', 10, '1 minute', 5),
			pglease.limit_set('llm/', 1000, '1 day', 1000, false)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pglease.take('api/a', 5), pglease.take('api/b', 2),
			pglease.reserve('llm/acme', 400, '1 hour')`); err != nil {
		t.Fatal(err)
	}
	st = readStatus(t, c)
	if len(st.Limits) != 2 || st.LimitsLeftOut != 0 {
		t.Fatalf("limits: got %+v (%d left out), want api/ and llm/", st.Limits, st.LimitsLeftOut)
	}
	api, llm := st.Limits[0], st.Limits[1]
	if api.Target != "api/" || api.Rate != 10 || api.Per != "1m0s" || api.Burst != 5 || api.Owner != nil ||
		api.Buckets != 2 || api.Limited != 1 || api.MinRemaining != 0 || api.Used != 5 || api.Reserved != 0 {
		t.Fatalf("limit api/: got %+v, want 10 per 1m0s, burst 5, 2 buckets, 1 limited, 0 left, 5 used", api)
	}
	if llm.Target != "llm/" || llm.Buckets != 1 || llm.Limited != 0 || llm.MinRemaining != 600 || llm.Used != 400 || llm.Reserved != 400 {
		t.Fatalf("limit llm/: got %+v, want 1 bucket, 600 left, 400 used, 400 reserved", llm)
	}
	r = c.mustRun(0, "status")
	requireContains(t, "status", r.stdout, "LIMIT", "LIMITED", "RESERVED", "api/", "10/1m0s", "0", "5/5", "llm/", "400/1000")
}

// leaseState reads a lease's state from the server.
func leaseState(t *testing.T, pool *pgxpool.Pool, name string) (state string, fence int64) {
	t.Helper()
	err := pool.QueryRow(t.Context(), `SELECT state, fence FROM pglease.lease_status WHERE name = $1`, name).Scan(&state, &fence)
	if err != nil {
		t.Fatalf("read lease %q: %v", name, err)
	}
	return state, fence
}

func testRunExitCodes(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -TERM $$", 128 + int(syscall.SIGTERM)},
		{"kill -KILL $$", 128 + int(syscall.SIGKILL)},
	} {
		name := "exit-" + strconv.Itoa(tc.want)
		r := c.run("run", "--lease", name, "--", "sh", "-c", tc.script)
		if r.code != tc.want {
			t.Fatalf("run %q: got exit %d, want %d\n%s", tc.script, r.code, tc.want, r)
		}
		if r.stderr != "" {
			t.Fatalf("run %q: got stderr %q, want none", tc.script, r.stderr)
		}
		if state, _ := leaseState(t, pool, name); state != "free" {
			t.Fatalf("lease after run %q: got %s, want free (released)", tc.script, state)
		}
	}

	// The command learns its tenure; an inherited one is not passed on.
	r := c.with("PGLEASE_FENCE=999", "PGLEASE_SLOT=999").mustRun(0, "run", "--lease", "env", "--slot", "env-scope:2", "--holder", "me",
		"--", "sh", "-c", `echo "$PGLEASE_LEASE $PGLEASE_FENCE $PGLEASE_HOLDER $PGLEASE_SLOT_SCOPE $PGLEASE_SLOT $PGLEASE_SLOT_FENCE"`)
	if want := "env 1 me env-scope 1 1\n"; r.stdout != want {
		t.Fatalf("environment of the command: got %q, want %q", r.stdout, want)
	}
	r = c.mustRun(0, "run", "--slot", "only-slot:1", "--", "sh", "-c", `echo "[$PGLEASE_LEASE][$PGLEASE_FENCE] $PGLEASE_SLOT $PGLEASE_SLOT_FENCE"`)
	if want := "[][] 1 1\n"; r.stdout != want {
		t.Fatalf("environment with a slot only: got %q, want %q", r.stdout, want)
	}
	// --units: the slot holds K of the scope's units.
	r = c.mustRun(0, "run", "--slot", "gpu:8", "--units", "4", "--", "sh", "-c", `echo "$PGLEASE_SLOT $PGLEASE_SLOT_UNITS"`)
	if want := "1 4\n"; r.stdout != want {
		t.Fatalf("environment with --units 4: got %q, want %q", r.stdout, want)
	}
	if _, fence := leaseState(t, pool, "env"); fence != 1 {
		t.Fatalf("fence of lease env: got %d, want 1", fence)
	}

	// The default --grace follows the TTL (a quarter, at most 10s), so a
	// short --ttl works alone; an explicit --grace above TTL/2 is refused.
	for _, ttl := range []string{"5s", "2s", "90s"} {
		c.mustRun(0, "run", "--lease", "short-ttl", "--ttl", ttl, "--", "true")
	}
	r = c.mustRun(2, "run", "--lease", "short-ttl", "--ttl", "5s", "--grace", "3s", "--", "true")
	requireContains(t, "run --ttl 5s --grace 3s", r.stderr, "--grace must be from 0 to half the --ttl (2.5s), got 3s")

	long := strings.Repeat("x", 300)
	r = c.mustRun(2, "run", "--lease", long, "--", "true")
	requireOneLine(t, "stderr for a too-long name", r.stderr)
	requireContains(t, "stderr for a too-long name", r.stderr, "(300 bytes)", "1 to 256 bytes")
	if strings.Contains(r.stderr, long[:100]) {
		t.Fatalf("a too-long name is echoed in full: %q", r.stderr)
	}

	r = c.mustRun(127, "run", "--lease", "missing", "--", "no-such-command-pglease")
	requireOneLine(t, "stderr for a missing command", r.stderr)
	requireContains(t, "stderr for a missing command", r.stderr, "no-such-command-pglease: command not found")
	if state, _ := leaseState(t, pool, "missing"); state != "free" {
		t.Fatalf("lease after a missing command: got %s, want free", state)
	}
}

// testRunRenews runs a command for three TTLs: each renewal must move
// the deadline by which the command is stopped (on Linux, the reaper's).
func testRunRenews(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	// Renewals every 667 ms, each with 0.9 s to succeed before SIGTERM
	// would be due: room for a loaded machine.
	r := c.with("PGLEASE_DATABASE_URL="+url).run("run", "--lease", "long", "--ttl", "2s", "--grace", "200ms", "--", "sleep", "6")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("a command running 3 TTLs: got exit %d, want 0 and no stderr\n%s", r.code, r)
	}
	if state, _ := leaseState(t, pgtest.Pool(t, url), "long"); state != "free" {
		t.Fatalf("lease after the run: got %s, want free (released)", state)
	}
}

func testRunForwardsSignals(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		b := c.start("run", "--lease", "fwd", "--", "sh", "-c",
			`trap 'echo trapped; exit 42' TERM INT; echo ready; while :; do sleep 0.05; done`)
		if line := b.readLine(30 * time.Second); line != "ready" {
			t.Fatalf("first line of the command: got %q, want ready", line)
		}
		if err := b.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if line := b.readLine(10 * time.Second); line != "trapped" {
			t.Fatalf("after %v to pglease: got %q, want trapped", sig, line)
		}
		b.waitExit(10*time.Second, 42)
		if state, _ := leaseState(t, pool, "fwd"); state != "free" {
			t.Fatalf("lease after the command exited: got %s, want free", state)
		}
	}
}

// waitStderr waits until the background run has written want to its
// standard error (a state only it can tell), or fails after timeout.
func (b *background) waitStderr(want string, timeout time.Duration) {
	b.t.Helper()
	expired := time.After(timeout)
	for !strings.Contains(b.stderr.String(), want) {
		select {
		case <-b.stderr.written:
		case <-expired:
			b.t.Fatalf("pglease did not write %q to stderr within %v; stderr:\n%s", want, timeout, b.stderr)
		}
	}
}

func testRunNoWaitAndWait(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)

	holder := c.start("run", "--lease", "cron", "--slot", "pool:1", "--", "sh", "-c", `echo "$PGLEASE_HOLDER"; read x || true`)
	holderID := holder.readLine(30 * time.Second)

	r := c.run("run", "--lease", "cron", "--", "true")
	t.Logf("run --no-wait on a held lease: exit %d in %v", r.code, r.elapsed)
	if r.code != 75 {
		t.Fatalf("run on a held lease: got exit %d, want 75\n%s", r.code, r)
	}
	// Well under a second on an idle machine; the bound leaves room for a
	// loaded one (and the race detector).
	if r.elapsed > 10*time.Second {
		t.Fatalf("run on a held lease took %v, want well under a second", r.elapsed)
	}
	requireOneLine(t, "stderr on a held lease", r.stderr)
	requireContains(t, "stderr on a held lease", r.stderr, `lease "cron" is held by "`+holderID+`"`, "fence 1", "for another")

	r = c.mustRun(75, "run", "--no-wait", "--slot", "pool:1", "--", "true")
	requireOneLine(t, "stderr on a full scope", r.stderr)
	requireContains(t, "stderr on a full scope", r.stderr, `scope "pool" is full`)

	// A signal while waiting stops the waiting; the command never runs.
	// Without -v, pglease says once what it waits for, and on whom.
	waiter := c.start("run", "--lease", "cron", "--wait", "--", "sh", "-c", "echo ran")
	waiter.waitStderr(`waiting for the lease "cron", held by "`+holderID+`" (fence 1)`, 30*time.Second)
	if err := waiter.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waiter.waitExit(10*time.Second, 128+int(syscall.SIGINT))
	requireContains(t, "stderr after SIGINT while waiting", waiter.stderr.String(), "before the command started")

	// --wait gets the lease once the holder releases it.
	waiter = c.start("run", "-v", "--lease", "cron", "--wait", "--", "sh", "-c", `echo "fence=$PGLEASE_FENCE"`)
	waiter.waitStderr("waiting for the lease", 30*time.Second)
	holder.closeStdin()
	holder.waitExit(10*time.Second, 0)
	if line := waiter.readLine(30 * time.Second); line != "fence=2" {
		t.Fatalf("waiter: got %q, want fence=2", line)
	}
	waiter.waitExit(10*time.Second, 0)
}

// forceRelease ends the tenure of lease name as an operator would.
func forceRelease(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	r, released, err := pgleaseadmin.ForceRelease(t.Context(), pool, name)
	if err != nil || !released {
		t.Fatalf("force release %q: got %+v, %v, want released", name, r, err)
	}
}

// requireGone fails unless process pid has exited.
func requireGone(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("process %d still runs after pglease exited", pid)
	}
}

func testRunLeaseLostRefused(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)

	// A TTL long enough that no renewal misses its deadline on a busy
	// machine: the loss must come from the refusal.
	b := c.start("run", "--lease", "lost", "--ttl", "5s", "--grace", "2s", "--", "sh", "-c",
		`trap 'echo term; exit 9' TERM; echo $$; while :; do sleep 0.05; done`)
	pid, err := strconv.Atoi(b.readLine(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	forceRelease(t, pool, "lost")
	lostAt := time.Now()
	if line := b.readLine(10 * time.Second); line != "term" {
		t.Fatalf("command after the lease was lost: got %q, want term (SIGTERM)", line)
	}
	b.waitExit(10*time.Second, 69)
	t.Logf("lease force-released: command stopped, pglease exited 69 after %v", time.Since(lostAt))
	requireContains(t, "stderr after losing the lease", b.stderr.String(), `lease "lost"`, "refused", "SIGTERM", "exit 69")
	requireGone(t, pid)
	if state, fence := leaseState(t, pool, "lost"); state != "free" || fence != 1 {
		t.Fatalf("lost lease: got %s with fence %d, want free with fence 1 (not taken again)", state, fence)
	}
}

// viaProxy returns connString with its host and port replaced by addr.
func viaProxy(t *testing.T, connString, addr string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := neturl.Parse(connString); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Host = addr
		q := u.Query()
		q.Del("host")
		q.Del("port")
		u.RawQuery = q.Encode()
		return u.String()
	}
	return connString + " host=" + host + " port=" + port
}

func testRelease(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)
	client, err := pglease.New(pool, pglease.Config{Holder: "gone-holder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.TryAcquire(t.Context(), "stuck", time.Hour); err != nil {
		t.Fatal(err)
	}

	r := c.mustRun(2, "release", "--force", "stuck")
	requireOneLine(t, "release without --yes", r.stderr)
	requireContains(t, "release without --yes", r.stderr, "--yes", `"gone-holder"`, "fence 1", "fence 2")
	if state, _ := leaseState(t, pool, "stuck"); state != "held" {
		t.Fatalf("lease after release without --yes: got %s, want still held", state)
	}

	r = c.mustRun(0, "release", "--force", "stuck", "--yes")
	requireContains(t, "release --force --yes", r.stdout, `released lease "stuck"`, `"gone-holder"`, "fence 1")
	if state, fence := leaseState(t, pool, "stuck"); state != "free" || fence != 1 {
		t.Fatalf("lease after release: got %s with fence %d, want free with fence 1", state, fence)
	}
	r = c.mustRun(0, "release", "--yes", "--force", "stuck")
	requireContains(t, "release of a free lease", r.stdout, "not held")
	r = c.mustRun(0, "run", "--lease", "stuck", "--", "sh", "-c", `echo "$PGLEASE_FENCE"`)
	if r.stdout != "2\n" {
		t.Fatalf("fence after a forced release: got %q, want 2", r.stdout)
	}
	c.mustRun(2, "release", "--force", "never-acquired")
}

func testDemo(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	r := c.mustRun(0, "demo", "--database", url)
	t.Logf("demo on the test database took %v:\n%s", r.elapsed, r.stdout)
	for l := range strings.Lines(r.stdout) {
		if strings.Count(l, "pglease:") > 1 {
			t.Errorf("a line of the demo says pglease: more than once: %s", l)
		}
	}
	requireContains(t, "demo", r.stdout, "took the lease, fence 1", "cut instance-1 off", "workload cancelled",
		"took over, fence 2", "stopping instance-", "took over, fence 3", "summary")
	// The demo deletes its own lease.
	if st := readStatus(t, c.with("PGLEASE_DATABASE_URL="+url)); len(st.Leases) != 0 {
		t.Fatalf("leases after the demo: got %+v, want none", st.Leases)
	}
	first, _, _ := strings.Cut(r.stdout, "\n")
	requireContains(t, "first line of the demo", first, "using postgres://", "(from --database)", "installing the pglease schema there if it is missing")
	// A database without the schema gets it.
	fresh := pgtest.NewDatabase(t)
	r = c.with("DATABASE_URL="+fresh).mustRun(0, "demo")
	requireContains(t, "demo on a fresh database", r.stdout, "(from DATABASE_URL)", "applied the pglease migrations", "summary")
	// So does the database the PG* variables name.
	cfg, err := pgx.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	r = c.with("PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)), "PGUSER="+cfg.User, "PGPASSWORD="+cfg.Password,
		"PGDATABASE="+cfg.Database, "PGSSLMODE=disable").mustRun(0, "demo")
	first, _, _ = strings.Cut(r.stdout, "\n")
	requireContains(t, "first line of the demo with PG* variables", first, "dbname="+cfg.Database, "(from PGHOST, PGPORT, PGUSER, PGDATABASE)")
	requireContains(t, "demo with PG* variables", r.stdout, "applied the pglease migrations", "summary")
}

func testDemoDiscovery(t *testing.T, c cli) {
	r := c.run("demo")
	t.Logf("demo with no database named took %v:\n%s%s", r.elapsed, r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("demo with no database: got exit %d, want 0\n%s", r.code, r)
	}
	first, _, _ := strings.Cut(r.stdout, "\n")
	requireContains(t, "first line of the demo with no database named", first,
		"using ", "PostgreSQL", "installing the pglease schema", "creating database pglease_demo")
	// The same server make test would find first, never a container.
	want := "throwaway cluster "
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:5432", time.Second); err == nil {
		_ = conn.Close()
		want = "using local server 127.0.0.1:5432"
	}
	requireContains(t, "first line of the demo with no database named", first, want)
	requireContains(t, "demo with no database named", r.stdout, "summary")
	if strings.Contains(first, "local server") {
		// Its database is dropped.
		_, after, _ := strings.Cut(first, "creating database ")
		name, _, _ := strings.Cut(after, " ")
		var n int
		err := pgtest.Pool(t, pgtest.AdminURL(t)).QueryRow(t.Context(),
			`SELECT count(*) FROM pg_catalog.pg_database WHERE datname = $1`, name).Scan(&n)
		if err != nil || n != 0 {
			t.Fatalf("database %q left on the local server after the demo: %d (%v), want dropped", name, n, err)
		}
	}
}

// closedPort returns a TCP address of 127.0.0.1 on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func testErrors(t *testing.T, c cli) {
	addr := closedPort(t)
	host, port, _ := net.SplitHostPort(addr)
	noSchema := pgtest.NewDatabase(t)
	migrated := pgtest.NewMigrated(t)
	changed := changedSchema(t)
	for _, tc := range []struct {
		name     string
		database string
		args     []string
		code     int
		want     []string
	}{
		{"bad URL", "postgres://u:pw@host:notaport/db", []string{"status"}, 2, []string{"invalid connection string", "invalid port", "hint:"}},
		{"bad DSN", "host=x port=notaport", []string{"status"}, 2, []string{"invalid connection string", "hint:", "key=value"}},
		{"unreachable URL", "postgres://u@" + addr + "/db?sslmode=disable", []string{"status"}, 1,
			[]string{"cannot connect to postgres://u@" + addr, "refused", "hint:"}},
		{"unreachable DSN", "host=" + host + " port=" + port + " user=u dbname=db sslmode=disable", []string{"migrate", "up"}, 1,
			[]string{"cannot connect to host=" + host, "refused", "hint:"}},
		{"missing database", pgtest.AdminURL(t), []string{"status", "--database", dbURL(t, pgtest.AdminURL(t), "pglease_no_such_db")}, 1,
			[]string{"cannot connect", "does not exist", "hint:"}},
		{"missing schema: status", noSchema, []string{"status"}, 1, []string{"schema pglease not found", "hint: run `pglease migrate up`"}},
		{"missing schema: run", noSchema, []string{"run", "--lease", "x", "--", "true"}, 1, []string{"schema pglease not found", "pglease migrate up"}},
		{"missing schema: release", noSchema, []string{"release", "--force", "x", "--yes"}, 1, []string{"schema pglease not found", "pglease migrate up"}},
		{"name too long: release", migrated, []string{"release", "--force", strings.Repeat("n", 300), "--yes"}, 2,
			[]string{"release: invalid argument: name must be 1 to 256 bytes"}},
		{"schema changed by hand: migrate up", changed, []string{"migrate", "up"}, 1,
			[]string{"migrate up: ", "not applied (nothing changed): cannot upgrade schema pglease", "index my_index", "hint: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.with("PGLEASE_DATABASE_URL="+tc.database).mustRun(tc.code, tc.args...)
			requireOneLine(t, "stderr", r.stderr)
			requireContains(t, "stderr", r.stderr, tc.want...)
			// Each message says pglease once, however many layers wrap it.
			if n := strings.Count(r.stderr, "pglease:"); n != 1 {
				t.Fatalf("stderr says %q %d times, want once: %q", "pglease:", n, r.stderr)
			}
			if r.stdout != "" {
				t.Fatalf("stdout: got %q, want nothing", r.stdout)
			}
		})
	}
}

// changedSchema returns the URL of a database one migration behind this
// build, changed by hand (an index of its own in schema pglease), so that
// the next upgrade refuses it; "" when this build has one migration only.
func changedSchema(t *testing.T) string {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx := t.Context()
	if err := schema.Goto(ctx, url, schema.Latest()-1); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE INDEX my_index ON pglease.leases (expires_at)`); err != nil {
		t.Fatal(err)
	}
	return url
}

// dbURL returns the URL of database name on the server of adminURL.
func dbURL(t *testing.T, adminURL, name string) string {
	t.Helper()
	url, err := pgserver.DatabaseURL(adminURL, name)
	if err != nil {
		t.Fatal(err)
	}
	return url
}

func testNoPasswordInOutput(t *testing.T, c cli) {
	const secret = "s3cretPassw0rd"
	addr := closedPort(t)
	host, port, _ := net.SplitHostPort(addr)
	urls := []string{
		"postgres://someone:" + secret + "@" + addr + "/db?sslmode=disable&connect_timeout=5",
		"host=" + host + " port=" + port + " user=someone password=" + secret + " dbname=db sslmode=disable",
		"host=" + host + " port=" + port + " user=someone password='" + secret + "' dbname=db",
		"postgres://someone:" + secret + "@" + host + ":notaport/db",
		"postgres://someone:" + secret + "@[::1/db",
	}
	commands := [][]string{
		{"status", "--json"}, {"migrate", "up"}, {"migrate", "down", "--yes"},
		{"run", "--lease", "x", "--wait", "--", "true"}, {"release", "--force", "x"}, {"demo"},
		{"exporter", "--listen", "127.0.0.1:0"},
	}
	for i, url := range urls {
		for j, args := range commands {
			var r result
			how := "flag"
			if (i+j)%2 == 0 {
				r = c.run(append([]string{args[0], "--database", url}, args[1:]...)...)
			} else {
				how = "environment"
				r = c.with("PGLEASE_DATABASE_URL=" + url).run(args...)
			}
			if r.code == 0 {
				t.Fatalf("pglease %v with %s: got exit 0, want a failure\n%s", args, url, r)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Fatalf("pglease %v with the password in the %s: the password is printed\n%s", args, how, r)
			}
			stderr := r.stderr
			if how == "flag" {
				// Once, before anything else: the password shows in ps.
				warning, rest, _ := strings.Cut(stderr, "\n")
				requireContains(t, "first line of stderr with a password in --database", warning, "warning", "ps", "PGLEASE_DATABASE_URL", ".pgpass")
				stderr = rest
			}
			requireOneLine(t, "stderr of pglease "+strings.Join(args, " "), stderr)
		}
	}
}
