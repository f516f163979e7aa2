package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EnvPgBouncer names the environment variable that, set to 1 (or any true
// value of strconv.ParseBool), makes the clients of the test databases
// ([Pool], [NewPool], [ClientURL]) connect through a PgBouncer in
// transaction pooling mode. The pooler is started once per test binary, on
// a free port of 127.0.0.1, and stopped by [Main]; pgbouncer must be
// installed (make deps). Migrations, [NewDatabase] and [AdminURL] still
// reach the server directly: golang-migrate holds a session advisory lock,
// which transaction pooling does not keep.
const EnvPgBouncer = "PGLEASE_TEST_PGBOUNCER"

const (
	// bouncerTimeout bounds starting PgBouncer and checking it forwards.
	bouncerTimeout = 30 * time.Second
	// bouncerStopTimeout bounds stopping PgBouncer.
	bouncerStopTimeout = 10 * time.Second
	// bouncerPrefix starts the name of PgBouncer's temporary directory.
	bouncerPrefix = "pglease-pgbouncer-"
)

// ThroughPooler reports whether the clients of the test databases connect
// through PgBouncer in transaction pooling mode, as [EnvPgBouncer] asks. A
// test that needs what transaction pooling does not give (session state
// such as LISTEN, SET or session advisory locks; a server-side prepared
// statement; a wake-up at a release rather than at expiry) can consult it.
// It fails the test when EnvPgBouncer holds something other than a boolean.
func ThroughPooler(t testing.TB) bool {
	t.Helper()
	v := os.Getenv(EnvPgBouncer)
	if v == "" {
		return false
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		t.Fatalf("pgtest: %s=%q: want 1, 0 or unset", EnvPgBouncer, v)
	}
	return on
}

// ClientURL returns the URL a client of the database at url connects
// with: url itself, or, when [ThroughPooler], the same database and role
// through this process's PgBouncer with pgx's default_query_exec_mode=exec.
// Use it for a pool a test configures itself; keep url for migrations and
// administrative connections. It fails the test when the pooler cannot be
// started.
func ClientURL(t testing.TB, url string) string {
	t.Helper()
	return clientURL(t, url)
}

// pgBouncer is a running PgBouncer, a child of this process.
type pgBouncer struct {
	dir     string         // temporary directory: configuration and log
	port    int            // listening port on 127.0.0.1
	admin   string         // the role its admin console accepts (admin_users)
	version string         // first line of pgbouncer --version
	cmd     *exec.Cmd      // sh running and watching pgbouncer
	stdin   io.WriteCloser // closing it stops pgbouncer
	exited  chan struct{}  // closed when cmd has exited
	halting atomic.Bool    // halt is stopping it
}

// bouncerState is the PgBouncer of this process, started once.
var bouncerState struct {
	once sync.Once
	b    *pgBouncer
	err  error
}

// bouncer returns this process's PgBouncer in front of the test server,
// starting it on first use, or fails the test.
func bouncer(t testing.TB) *pgBouncer {
	t.Helper()
	s := server(t)
	st := &bouncerState
	st.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bouncerTimeout)
		defer cancel()
		st.b, st.err = startPgBouncer(ctx, s.URL)
		if st.err == nil {
			fmt.Fprintf(os.Stderr, "pgtest: clients connect through %s on 127.0.0.1:%d (transaction pooling, default_query_exec_mode=exec)\n",
				st.b.version, st.b.port)
		}
	})
	if st.err != nil {
		t.Fatalf("pgtest: %s is set: PgBouncer in front of %s: %v", EnvPgBouncer, s.Source, st.err)
	}
	return st.b
}

// stopPooler stops this process's PgBouncer, if one was started, and
// returns the exit code it adds to the run's: 1 when PgBouncer could not be
// stopped (the error is printed), else 0.
func stopPooler() int {
	b := bouncerState.b
	if b == nil {
		return 0
	}
	if err := b.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	return 0
}

// watchScript runs pgbouncer ("$@") in its directory and stops it
// (SIGTERM) when its standard input, a pipe from this process, closes: when
// halt closes it, or when this process dies in any way, so that no pooler
// outlives the tests. Stopped that way it also removes the directory, which
// a dead process could not do. The shell exits with pgbouncer. Standard
// input is duplicated to fd 3 because a background list of a
// non-interactive shell reads /dev/null.
const watchScript = `exec 3<&0
"$@" </dev/null 3<&- &
pid=$!
(read -r _ <&3; : >stopping; kill -TERM "$pid" 2>/dev/null) &
exec 3<&-
wait "$pid"
status=$?
if [ -e stopping ]; then rm -rf "$PWD"; fi
exit "$status"`

// startPgBouncer starts PgBouncer in transaction pooling mode on a free
// port of 127.0.0.1, forwarding every database to the server of adminURL,
// and checks that a client reaches the server through it.
func startPgBouncer(ctx context.Context, adminURL string) (*pgBouncer, error) {
	bin, err := findPgBouncer()
	if err != nil {
		return nil, err
	}
	server, err := pgconn.ParseConfig(adminURL)
	if err != nil {
		return nil, fmt.Errorf("parse server url: %w", err)
	}
	version, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", bin, err)
	}
	var b *pgBouncer
	for range 3 { // another process may take the free port first
		b, err = launch(ctx, bin, server)
		if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	b.version = firstLine(version)
	if err := b.check(ctx, adminURL); err != nil {
		_ = b.stop()
		return nil, err
	}
	return b, nil
}

// launch starts pgbouncer on a free port, in a new temporary directory.
func launch(ctx context.Context, bin string, server *pgconn.Config) (*pgBouncer, error) {
	dir, err := os.MkdirTemp("", bouncerPrefix)
	if err != nil {
		return nil, fmt.Errorf("create pgbouncer directory: %w", err)
	}
	b := &pgBouncer{dir: dir, admin: server.User}
	if b.port, err = freePort(); err == nil {
		err = b.start(ctx, bin, server)
	}
	if err != nil {
		_ = b.stop()
		return nil, err
	}
	return b, nil
}

// findPgBouncer returns the path of pgbouncer: on PATH, or where Debian
// and Homebrew install it, which may be missing from a user's PATH.
func findPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/bin/pgbouncer", "/opt/homebrew/bin/pgbouncer"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("pgbouncer not found on PATH nor in /usr/sbin, /usr/local/bin, /opt/homebrew/bin; install it (make deps, or apt-get install pgbouncer)")
}

// start writes the configuration and starts pgbouncer on b.port, and
// returns when it accepts connections.
func (b *pgBouncer) start(ctx context.Context, bin string, server *pgconn.Config) error {
	ini, users := filepath.Join(b.dir, "pgbouncer.ini"), filepath.Join(b.dir, "userlist.txt")
	// Read as root before pgbouncer switches user: kept private (0600), as
	// the user list may hold the server's password.
	if err := os.WriteFile(users, []byte(userList(server)), 0o600); err != nil {
		return fmt.Errorf("write pgbouncer user list: %w", err)
	}
	if err := os.WriteFile(ini, []byte(bouncerConfig(server, b.port, users)), 0o600); err != nil {
		return fmt.Errorf("write pgbouncer configuration: %w", err)
	}
	args := []string{bin, ini}
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root; -u switches user after reading
		// its configuration.
		args = []string{bin, "-u", "postgres", ini}
	}
	logPath := b.logPath()
	log, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("create pgbouncer log: %w", err)
	}
	defer log.Close() // the child has its own descriptor
	cmd := exec.Command("sh", append([]string{"-c", watchScript, "sh"}, args...)...)
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = log, log
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("start pgbouncer: %w", err)
	}
	if err := cmd.Start(); err != nil {
		_ = stdin.Close()
		return fmt.Errorf("start pgbouncer: %w", err)
	}
	b.cmd, b.stdin, b.exited = cmd, stdin, make(chan struct{})
	go func() {
		defer close(b.exited)
		_ = cmd.Wait()
		if !b.halting.Load() { // say so now: the tests only see refused connections
			fmt.Fprintf(os.Stderr, "pgtest: pgbouncer on port %d exited during the tests (%v)%s\n", b.port, cmd.ProcessState, logTail(logPath))
		}
	}()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var d net.Dialer
	for {
		select {
		case <-b.exited:
			return fmt.Errorf("pgbouncer exited at start%s", logTail(logPath))
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer did not listen on %s: %w%s", addr, ctx.Err(), logTail(logPath))
		case <-tick.C:
		}
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			_ = c.Close()
			return nil
		}
	}
}

// check connects through the pooler to the database of adminURL and runs a
// query.
func (b *pgBouncer) check(ctx context.Context, adminURL string) error {
	u, err := viaBouncer(adminURL, b.port)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return fmt.Errorf("connect through pgbouncer: %w%s", err, logTail(b.logPath()))
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("query through pgbouncer: %w%s", err, logTail(b.logPath()))
	}
	return nil
}

// closeServers closes the pooler's server connections to database name,
// if this process runs a pooler, before the database is dropped: dropped
// under them, each would get the server's FATAL while lent to no client,
// and PgBouncer 1.18 aborts when such a message meets a server whose
// cancel request is in flight (pgbouncer issue 822, fixed in 1.20; pgx
// sends one whenever a context ends during a query). RECONNECT closes
// each server connection once it is released (a cancel in flight
// included); KILL would be at once, but 1.18 aborts on it too when a
// cancel request is in flight. It waits until SHOW SERVERS lists none for
// the database, or ctx ends.
func closeServers(ctx context.Context, name string) error {
	b := bouncerState.b
	if b == nil || b.halting.Load() {
		return nil
	}
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@127.0.0.1:%d/pgbouncer?default_query_exec_mode=simple_protocol",
		url.PathEscape(b.admin), b.port))
	if err != nil {
		return fmt.Errorf("pgbouncer admin console: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "RECONNECT "+pgx.Identifier{name}.Sanitize()); err != nil {
		if strings.Contains(err.Error(), "no such database") { // never used through the pooler
			return nil
		}
		return fmt.Errorf("pgbouncer RECONNECT %s: %w", name, err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := serversOf(ctx, conn, name)
		if err != nil || n == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer still has %d server connections to %s: %w", n, name, ctx.Err())
		case <-tick.C:
		}
	}
}

// serversOf returns how many server connections SHOW SERVERS lists for
// database name.
func serversOf(ctx context.Context, conn *pgx.Conn, name string) (int, error) {
	rows, err := conn.Query(ctx, "SHOW SERVERS")
	if err != nil {
		return 0, fmt.Errorf("pgbouncer SHOW SERVERS: %w", err)
	}
	defer rows.Close()
	col := -1
	for i, f := range rows.FieldDescriptions() {
		if f.Name == "database" {
			col = i
		}
	}
	if col < 0 {
		return 0, errors.New("pgbouncer SHOW SERVERS: no database column")
	}
	n := 0
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return 0, fmt.Errorf("pgbouncer SHOW SERVERS: %w", err)
		}
		if v[col] == name {
			n++
		}
	}
	return n, rows.Err()
}

// logPath is pgbouncer's log: its standard output and error.
func (b *pgBouncer) logPath() string { return filepath.Join(b.dir, "pgbouncer.log") }

// strayNotify is what PgBouncer logs when a notification reaches a server
// connection that no client holds: a LISTEN was left on it, which no
// client hears (and which PgBouncer 1.18 can abort on, when a cancel
// request meets such a packet).
const strayNotify = "got packet 'A' from server when not linked"

// stop stops pgbouncer and removes its directory. It fails when the log
// shows a stray notification (strayNotify): a LISTEN went through the
// pooler.
func (b *pgBouncer) stop() error {
	log, _ := os.ReadFile(b.logPath())
	err := b.halt()
	if n := bytes.Count(log, []byte(strayNotify)); n > 0 && err == nil {
		err = fmt.Errorf("pgbouncer logged %d notifications that reached no client (%q): something ran LISTEN through the pooler", n, strayNotify)
	}
	if rmErr := os.RemoveAll(b.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("remove pgbouncer directory: %w", rmErr)
	}
	return err
}

// halt stops pgbouncer, if it was started, and waits for it: closing its
// watcher's input makes the watcher send SIGTERM. It returns an error with
// the log's tail if pgbouncer had already exited.
func (b *pgBouncer) halt() error {
	if b.cmd == nil {
		return nil
	}
	defer func() { b.cmd = nil }()
	b.halting.Store(true)
	select {
	case <-b.exited:
		_ = b.stdin.Close()
		return fmt.Errorf("pgbouncer on port %d exited before the end of the tests (%v)%s", b.port, b.cmd.ProcessState, logTail(b.logPath()))
	default:
	}
	_ = b.stdin.Close()
	select {
	case <-b.exited:
		return nil
	case <-time.After(bouncerStopTimeout):
		_ = b.cmd.Process.Kill()
		<-b.exited
		return fmt.Errorf("pgbouncer on port %d did not stop within %v; killed its watcher", b.port, bouncerStopTimeout)
	}
}

// bouncerConfig returns pgbouncer.ini: transaction pooling on port of
// 127.0.0.1 (no Unix socket), every database forwarded to the server, no
// client authentication (loopback only; any role of the server can connect,
// looked up through auth_query as the server URL's role).
func bouncerConfig(server *pgconn.Config, port int, userList string) string {
	return fmt.Sprintf(`;; pglease test pooler: transaction pooling, forwarding every database
[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
auth_user = %s
admin_users = %[5]s
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
server_login_retry = 1
autodb_idle_timeout = 60
server_idle_timeout = 30
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
`, iniValue(server.Host), server.Port, port, userList, server.User)
}

// userList returns pgbouncer's auth_file: the server URL's role with its
// password, which pgbouncer uses to log in to the server.
func userList(server *pgconn.Config) string {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return q(server.User) + " " + q(server.Password) + "\n"
}

// iniValue quotes v for a connection string in pgbouncer.ini when needed.
func iniValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " '\\") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// logTail returns the last lines of the log at path as lines to append to
// an error message, or "".
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	b = bytes.TrimSpace(b)
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	if len(b) == 0 {
		return ""
	}
	return "\n" + string(b)
}

// firstLine returns the first line of b.
func firstLine(b []byte) string {
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}
