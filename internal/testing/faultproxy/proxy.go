// Package faultproxy is a TCP proxy for tests that injects network faults
// between a client and Postgres: it can blackhole traffic (connections stay
// open, bytes stop flowing, as when a network partition or a dead peer
// leaves sockets hanging) and cut every connection.
package faultproxy

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// Proxy forwards connections from its listen address to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	blackhole bool
	resume    chan struct{} // closed when the blackhole ends
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
	closed    bool
}

// PostgresTarget returns the address New dials for a Postgres server at
// host and port, as pgx parses them: "host:port" over TCP, or the server's
// socket file when host is a Unix socket directory.
func PostgresTarget(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", host, port)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// New starts a proxy on 127.0.0.1 (random port) that forwards to target:
// "host:port" over TCP, or the path of a Unix socket (starting with "/").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, resume: make(chan struct{})}
	close(p.resume)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's listen address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Route points cfg, a connection to the proxy's target, at the proxy
// instead: its address, and no fallbacks (they would go around it). TLS is
// what the last fallback would have used, so that sslmode=prefer (TLS
// first, then without) reaches a server that offers no TLS.
func (p *Proxy) Route(cfg *pgconn.Config) {
	addr := p.ln.Addr().(*net.TCPAddr)
	if n := len(cfg.Fallbacks); n > 0 {
		cfg.TLSConfig = cfg.Fallbacks[n-1].TLSConfig
	}
	cfg.Host, cfg.Port, cfg.Fallbacks = addr.IP.String(), uint16(addr.Port), nil
}

// Blackhole stops forwarding bytes in both directions until Resume. Open
// connections stay open and new ones are accepted but hang.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.blackhole {
		p.blackhole = true
		p.resume = make(chan struct{})
	}
}

// Resume ends a Blackhole: held-back bytes flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blackhole {
		p.blackhole = false
		close(p.resume)
	}
}

// CutAll closes every open connection (both sides).
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy, closes every connection and waits for its
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Resume()
	p.CutAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		network := "tcp"
		if strings.HasPrefix(p.target, "/") {
			network = "unix"
		}
		server, err := net.Dial(network, p.target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

// track registers a connection pair, or closes it when the proxy is closed.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies src to dst, holding bytes back during a blackhole.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resume := p.resume
			p.mu.Unlock()
			<-resume
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or a connection cut by CutAll or Close
		}
	}
}
