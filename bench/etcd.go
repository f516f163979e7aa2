package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcd runs as the embedded server of go.etcd.io/etcd/server/v3 in a
// process of its own: the bench binary, run again as "bench serve-etcd DIR
// PORT" (etcdCommand). The child prints "ready VERSION" on its standard
// output once the server serves, and closes it on SIGTERM.

// etcdCommand runs the child's side when args are "serve-etcd DIR PORT",
// and reports whether it did.
func etcdCommand(args []string) (bool, error) {
	if len(args) == 0 || args[0] != "serve-etcd" {
		return false, nil
	}
	if len(args) != 3 {
		return true, errors.New("usage: bench serve-etcd DIR PORT")
	}
	port, err := strconv.Atoi(args[2])
	if err != nil {
		return true, fmt.Errorf("serve-etcd: port %q: %w", args[2], err)
	}
	return true, serveEtcd(args[1], port)
}

// serveEtcd is the child's side: it runs an embedded single-member etcd
// with its data in dir/data, its log in dir/etcd.log and clients on 127.0.0.1:port, fsyncing its WAL (the
// default), until SIGTERM or SIGINT.
func serveEtcd(dir string, port int) error {
	cfg := embed.NewConfig()
	cfg.Dir = dir + "/data"
	cfg.Name = "bench"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{dir + "/etcd.log"}
	client, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", port))
	peer, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	// One member: its peer listener is never dialled, but etcd needs one.
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	peer.Host = fmt.Sprintf("127.0.0.1:%d", peerPort)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start the embedded etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(storeStartTimeout):
		return fmt.Errorf("the embedded etcd did not become ready within %s", storeStartTimeout)
	}
	fmt.Printf("ready %s\n", version.Version)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
		return nil
	case err := <-e.Err():
		return err
	}
}

// startEtcd starts the embedded etcd in a child process, its data in a
// new directory under parent.
func startEtcd(ctx context.Context, parent string) (*store, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "pglease-bench-etcd-")
	if err != nil {
		return nil, err
	}
	s := &store{name: "etcd", addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	s.cmd = exec.Command(self, "serve-etcd", dir, strconv.Itoa(port))
	s.cmd.Stderr = os.Stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if err := s.cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("start the etcd child: %w", err), os.RemoveAll(dir))
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line := <-ready:
		v, ok := strings.CutPrefix(line, "ready ")
		if !ok {
			return nil, errors.Join(fmt.Errorf("the etcd child ended before it was ready (its log: %s/etcd.log)", dir), s.stop())
		}
		s.version = v
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), s.stop())
	case <-time.After(storeStartTimeout):
		return nil, errors.Join(fmt.Errorf("the etcd child was not ready within %s", storeStartTimeout), s.stop())
	}
	return s, nil
}

// etcdLock is etcd's concurrency.Mutex, its idiomatic lock: one client per
// instance (gRPC multiplexes the C clients' calls over it, as in a
// service), a session (a lease kept alive in the background) per client,
// and a cycle of Lock and Unlock on a name of the client's own. Uncontended,
// Lock is one transaction (put the key under the session's lease if it is
// absent, read the prefix's first key) and Unlock one delete.
func (e *env) etcdLock(s *store) workload {
	return workload{
		key: etcdKey, name: "etcd Mutex", path: "etcd " + s.version + ": concurrency.Mutex Lock + Unlock",
		steps: []string{"lock", "unlock"},
		start: func(ctx context.Context, n int) (*instance, error) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.addr}, DialTimeout: 5 * time.Second})
			if err != nil {
				return nil, err
			}
			sessions := make([]*concurrency.Session, n)
			inst := &instance{cycles: make([][]step, n), serverTicks: s.cpuTicks, close: func() {
				for _, ss := range sessions {
					if ss != nil {
						_ = ss.Close()
					}
				}
				_ = cli.Close()
			}}
			err = parallel(n, func(i int) error {
				ss, err := concurrency.NewSession(cli, concurrency.WithTTL(int(cycleTTL/time.Second)))
				if err != nil {
					return err
				}
				sessions[i] = ss
				m := concurrency.NewMutex(ss, "/"+id(etcdKey, i)+"/")
				inst.cycles[i] = []step{m.Lock, m.Unlock}
				return nil
			})
			if err != nil {
				inst.close()
				return nil, err
			}
			return inst, nil
		},
	}
}
