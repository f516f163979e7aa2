package pgserver

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// clusterPrefix starts the name of every throwaway cluster directory.
	clusterPrefix = "pglease-pg-"
	// ownerFile, in a cluster directory, records the process that owns the
	// cluster: its PID, its PID namespace and the bin directory.
	ownerFile = "owner"
	// startAttempts bounds how often a start is retried because another
	// process took the chosen port first.
	startAttempts = 3
	// stopTimeout bounds stopping a cluster after a failed start.
	stopTimeout = 30 * time.Second
	// maxSocketPath is the longest Unix socket path every platform accepts,
	// less room for "/.s.PGSQL.65535".
	maxSocketPath = 103 - len("/.s.PGSQL.65535")
)

// binDirGlobs lists the install directories searched for initdb and pg_ctl
// after PATH and pg_config, by pattern. Among the matches of one pattern the
// highest version wins. Tests replace it.
var binDirGlobs = []string{
	"/usr/lib/postgresql/*/bin",          // Debian, Ubuntu
	"/usr/pgsql-*/bin",                   // PGDG RPMs
	"/opt/homebrew/opt/postgresql@*/bin", // Homebrew, Apple silicon
	"/usr/local/opt/postgresql@*/bin",    // Homebrew, Intel
	"/usr/local/pgsql/bin",               // built from source
}

// searchPath is the PATH used to look for pg_ctl and pg_config; empty means
// the process's PATH. Tests replace it.
var searchPath = ""

// StartCluster creates and starts a throwaway PostgreSQL cluster with the
// initdb and pg_ctl of binDir (found as [Options.BinDir] describes when
// empty). The cluster lives in a new directory under [os.TempDir], uses
// trust authentication for the superuser postgres, and listens on a free
// port of 127.0.0.1 and on a Unix socket in its directory. When the process
// runs as root, the cluster runs as the operating system user postgres,
// since initdb and pg_ctl refuse to run as root.
//
// [Server.Stop] stops the cluster (pg_ctl stop -m immediate) and removes its
// directory. Before starting, StartCluster stops and removes the clusters
// left behind by processes of the same PID namespace that exited without
// calling Stop.
func StartCluster(ctx context.Context, binDir string) (*Server, error) {
	if binDir == "" {
		var err error
		if binDir, err = findBinDir(); err != nil {
			return nil, err
		}
	} else if err := checkBinDir(binDir); err != nil {
		return nil, err
	}
	as, err := clusterUser()
	if err != nil {
		return nil, err
	}

	parent := os.TempDir()
	if err := as.canReach(parent); err != nil {
		return nil, fmt.Errorf("%w (set TMPDIR to a directory it can reach, such as /tmp)", err)
	}
	reapStale(ctx, parent, as)

	dir, err := os.MkdirTemp(parent, clusterPrefix)
	if err != nil {
		return nil, fmt.Errorf("create cluster directory: %w", err)
	}
	c := &cluster{binDir: binDir, dir: dir, as: as}
	started := false
	defer func() {
		if !started {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
			defer cancel()
			_ = c.destroy(ctx)
		}
	}()

	owner := fmt.Sprintf("%d\n%s\n%s\n", os.Getpid(), pidNamespace(), binDir)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
		return nil, fmt.Errorf("write owner file: %w", err)
	}
	if err := os.Mkdir(c.socketDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	for _, p := range []string{dir, c.socketDir()} {
		if err := as.chown(p); err != nil {
			return nil, err
		}
	}

	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	port, err := c.start(ctx)
	if err != nil {
		return nil, err
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	s, err := probe(ctx, url, fmt.Sprintf("throwaway cluster %s (port %d)", binDir, port), checkTimeout)
	if err != nil {
		return nil, fmt.Errorf("connect to throwaway cluster: %w", err)
	}
	s.stop = c.destroy
	started = true
	return s, nil
}

// cluster is a throwaway cluster's directory and the binaries that run it.
type cluster struct {
	binDir string
	dir    string
	as     *runAs
}

// dataDir is the data directory, made by initdb.
func (c *cluster) dataDir() string { return filepath.Join(c.dir, "data") }

// socketDir is the directory of the server's Unix socket.
func (c *cluster) socketDir() string { return filepath.Join(c.dir, "sock") }

// logFile is the server's log.
func (c *cluster) logFile() string { return filepath.Join(c.dir, "postgres.log") }

// command returns a command running the program name of c.binDir as the
// cluster's user, in the cluster directory, with the PG* variables of the
// environment removed and messages in English.
func (c *cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dir
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=")
	})
	cmd.Env = append(env, "LC_ALL=C")
	c.as.apply(cmd)
	return cmd
}

// initdb creates the data directory and configures it.
func (c *cluster) initdb(ctx context.Context) error {
	out, err := c.command(ctx, "initdb",
		"-D", c.dataDir(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale", "--no-sync",
	).CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %w%s", err, details(out))
	}
	sockets := c.socketDir()
	if len(sockets) > maxSocketPath {
		sockets = "" // TCP only: the path is too long for a socket
	}
	conf := fmt.Sprintf("\n# pglease throwaway cluster\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = %s\nmax_connections = 200\n",
		quoteConf(sockets))
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("configure cluster: %w", err)
	}
	if _, err := f.WriteString(conf); err != nil {
		_ = f.Close()
		return fmt.Errorf("configure cluster: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("configure cluster: %w", err)
	}
	return nil
}

// start starts the server on a free port and waits until it accepts
// connections. It returns the port.
func (c *cluster) start(ctx context.Context) (int, error) {
	var err error
	for range startAttempts {
		var port int
		if port, err = freePort(); err != nil {
			return 0, err
		}
		logStart := fileSize(c.logFile())
		var out []byte
		out, err = c.command(ctx, "pg_ctl", "start", "-w", "-t", "60", "-s",
			"-D", c.dataDir(), "-l", c.logFile(), "-o", "-p "+strconv.Itoa(port),
		).CombinedOutput()
		if err == nil {
			return port, nil
		}
		log := readFrom(c.logFile(), logStart)
		err = fmt.Errorf("pg_ctl start: %w%s", err, details(out, log))
		if ctx.Err() != nil || !bytes.Contains(log, []byte("could not bind")) {
			return 0, err
		}
	}
	return 0, err
}

// destroy stops the server and removes the cluster directory. It leaves the
// directory in place if a server may still be running from it.
func (c *cluster) destroy(ctx context.Context) error {
	pidFile := filepath.Join(c.dataDir(), "postmaster.pid")
	if _, err := os.Stat(pidFile); err == nil {
		out, stopErr := c.command(ctx, "pg_ctl", "stop", "-w", "-s", "-D", c.dataDir(), "-m", "immediate").CombinedOutput()
		if stopErr != nil && postmasterRunning(pidFile) {
			return fmt.Errorf("stop throwaway cluster in %s: %w%s", c.dir, stopErr, details(out))
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("remove throwaway cluster: %w", err)
	}
	return nil
}

// postmasterRunning reports whether the process named by a postmaster.pid
// file may still be running.
func postmasterRunning(pidFile string) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return true
	}
	return processExists(pid)
}

// reapStale stops and removes the clusters under parent whose owning process
// has exited, when that process ran in this PID namespace. It is best effort.
func reapStale(ctx context.Context, parent string, as *runAs) {
	dirs, _ := filepath.Glob(filepath.Join(parent, clusterPrefix+"*"))
	ns := pidNamespace()
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours, or still being created
		}
		fields := strings.Split(string(b), "\n")
		if len(fields) < 3 || fields[1] != ns {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil || processExists(pid) {
			continue
		}
		c := &cluster{binDir: fields[2], dir: dir, as: as}
		ctx, cancel := context.WithTimeout(ctx, stopTimeout)
		_ = c.destroy(ctx)
		cancel()
	}
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

// findBinDir returns the first directory holding initdb and pg_ctl among
// the one of pg_ctl on PATH, pg_config --bindir and binDirGlobs.
func findBinDir() (string, error) {
	path := cmp.Or(searchPath, os.Getenv("PATH"))
	if pgCtl, err := lookPath("pg_ctl", path); err == nil {
		if resolved, err := filepath.EvalSymlinks(pgCtl); err == nil && checkBinDir(filepath.Dir(resolved)) == nil {
			return filepath.Dir(resolved), nil
		}
		if checkBinDir(filepath.Dir(pgCtl)) == nil {
			return filepath.Dir(pgCtl), nil
		}
	}
	if pgConfig, err := lookPath("pg_config", path); err == nil {
		if out, err := exec.Command(pgConfig, "--bindir").Output(); err == nil {
			if dir := strings.TrimSpace(string(out)); checkBinDir(dir) == nil {
				return dir, nil
			}
		}
	}
	for _, pattern := range binDirGlobs {
		matches, _ := filepath.Glob(pattern)
		matches = slices.DeleteFunc(matches, func(dir string) bool { return checkBinDir(dir) != nil })
		if len(matches) > 0 {
			// The version is in the part the wildcard matched.
			prefix, _, _ := strings.Cut(pattern, "*")
			return slices.MaxFunc(matches, func(a, b string) int {
				return slices.Compare(versionOf(strings.TrimPrefix(a, prefix)), versionOf(strings.TrimPrefix(b, prefix)))
			}), nil
		}
	}
	return "", fmt.Errorf("initdb and pg_ctl not found on PATH, in pg_config --bindir or in %s", strings.Join(binDirGlobs, ", "))
}

// lookPath finds the executable name in the directories of path.
func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		if p := filepath.Join(cmp.Or(dir, "."), name); isExecutable(p) {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// checkBinDir returns an error unless dir holds initdb, pg_ctl and postgres.
func checkBinDir(dir string) error {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if !isExecutable(filepath.Join(dir, name)) {
			return fmt.Errorf("no executable %s in %s", name, dir)
		}
	}
	return nil
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// versionNumber matches a version in an install path, such as the 15 of
// /usr/lib/postgresql/15/bin or the 16.2 of postgresql@16.2.
var versionNumber = regexp.MustCompile(`\d+(?:\.\d+)*`)

// versionOf returns the parts of the first version number in s.
func versionOf(s string) []int {
	var parts []int
	for _, p := range strings.Split(versionNumber.FindString(s), ".") {
		n, _ := strconv.Atoi(p)
		parts = append(parts, n)
	}
	return parts
}

// quoteConf quotes s as a postgresql.conf string.
func quoteConf(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// fileSize returns the size of the file at path, or 0.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns the content of the file at path from offset on, or nil.
func readFrom(path string, offset int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
	return b
}

// details returns the last lines of each output, at most about 2 kB each,
// as lines to append to an error message, or "" when there are none.
func details(outputs ...[]byte) string {
	const limit = 2048
	var b strings.Builder
	for _, out := range outputs {
		out = bytes.TrimSpace(out)
		if len(out) > limit {
			out = out[len(out)-limit:]
			if i := bytes.IndexByte(out, '\n'); i >= 0 {
				out = out[i+1:]
			}
		}
		if len(out) > 0 {
			b.WriteByte('\n')
			b.Write(out)
		}
	}
	return b.String()
}
