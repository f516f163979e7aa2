package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The comparison with the stores a user would run instead of Postgres for
// locks (-stores): etcd and Redis, each a server of its own started by the
// bench, its data on the same disk as the Postgres server's (the directory
// of -store-dir), each durably writing every change before it answers:
//
//   - etcd: an embedded server (go.etcd.io/etcd/server/v3, the module's
//     version) in a process of its own (the bench binary run again with
//     -serve-etcd), WAL fsync on, as etcd ships: a Lock is a transaction
//     (put-if-absent of the lock key under the session's lease, one raft
//     entry) and an Unlock a delete (another), each fsynced to the WAL
//     before the reply; concurrent proposals share fsyncs;
//   - Redis: redis-server from PATH with appendonly yes and appendfsync
//     always: SET NX PX and the compare-and-delete script each append to
//     the AOF and fsync before the reply; the writes of one event-loop
//     iteration share an fsync.
//
// A pglease cycle commits twice (acquire, release), each commit flushing
// the WAL; concurrent commits share flushes.

// storeStartTimeout bounds how long a store's server may take to answer.
const storeStartTimeout = 30 * time.Second

// store is a server the bench started, stopped by stop.
type store struct {
	name string
	addr string // host:port its clients dial
	cmd  *exec.Cmd
	dir  string
	// version is what the server reports about itself.
	version string
}

// cpuTicks returns the CPU time (utime+stime, clock ticks) the store's
// process has used so far, by its pid.
func (s *store) cpuTicks() (map[int]int64, error) {
	pid := s.cmd.Process.Pid
	t, err := processTicks(pid)
	return map[int]int64{pid: t}, err
}

// stop ends the server and removes its data.
func (s *store) stop() error {
	var err error
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- s.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
			err = fmt.Errorf("%s did not stop within 10 s of SIGTERM: killed", s.name)
		}
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// freePort returns a TCP port of the loopback interface that nothing
// listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts redis-server on a port of its own with its AOF in a
// new directory under parent, fsynced on every write.
func startRedis(ctx context.Context, parent string) (*store, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not on PATH (make deps installs it; or run with -stores etcd): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "pglease-bench-redis-")
	if err != nil {
		return nil, err
	}
	s := &store{name: "redis", addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	s.cmd = exec.Command(bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	if s.version, err = redisReady(ctx, s.addr); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		return nil, errors.Join(fmt.Errorf("redis-server on %s: %w\n%s", s.addr, err, tail(log, 10)), s.stop())
	}
	return s, nil
}

// redisReady waits until the Redis server at addr answers INFO server and
// returns its version.
func redisReady(ctx context.Context, addr string) (string, error) {
	deadline := time.Now().Add(storeStartTimeout)
	for {
		v, err := redisVersion(addr)
		if err == nil {
			return v, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no answer within %s: %w", storeStartTimeout, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// redisVersion asks the server at addr for its version in RESP, without a
// client library: what is measured is only the client's cycle.
func redisVersion(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// processTicks returns the CPU time (utime + stime, in clock ticks) pid
// has used, from /proc/<pid>/stat.
func processTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	// utime and stime are fields 14 and 15, the 12th and 13th after the
	// name.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return ut + st, nil
}
