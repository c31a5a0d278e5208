// Package faultproxy injects faults between a client under test and Redis.
//
// Proxy is a TCP proxy for network faults: partitions (Blackhole),
// dropped connections (CutAll), a server that refuses connections
// (Refuse) and a moved service address (Retarget). Hook is a go-redis hook for finer faults on
// chosen commands or connection writes: delays, lost replies, resent
// commands, failed writes (see hook.go).
package faultproxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections accepted on a free 127.0.0.1 port to a
// target address. Its methods are safe for concurrent use.
type Proxy struct {
	target    atomic.Pointer[string] // where new connections go (Retarget)
	addr      string                 // the address it listens on, kept while it refuses
	ctx       context.Context        // cancelled by Close
	cancel    context.CancelFunc
	blackhole atomic.Bool
	wg        sync.WaitGroup

	mu       sync.Mutex
	ln       net.Listener // nil while it refuses (Refuse)
	closed   bool
	refusing bool
	conns    map[net.Conn]struct{} // both ends of every live proxied connection
	active   int                   // live proxied (client, target) pairs
}

// New starts a proxy to target on a free loopback port and closes it when
// tb's test ends.
func New(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("faultproxy: listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, addr: ln.Addr().String(), ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	p.target.Store(&target)
	p.wg.Add(1)
	go p.acceptLoop(ln)
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's "127.0.0.1:port" address, to give to clients.
func (p *Proxy) Addr() string { return p.addr }

// Blackhole turns a silent network partition on or off. While on, the proxy
// keeps every connection open (and still accepts new ones) but discards all
// bytes in both directions, so clients' reads hang until their own
// timeouts. Discarded bytes are lost for good: after Blackhole(false) new
// connections work normally, while an existing connection resumes
// forwarding but its protocol stream may be out of step (go-redis discards
// connections that timed out, so this is harmless for it). A connection
// closed by either end is still closed through the proxy.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// Retarget sends the connections accepted from now on to target instead,
// as a failover moves a service address to another server. Connections
// already open stay with the old target: CutAll moves them (their clients
// reconnect to the new one).
func (p *Proxy) Retarget(target string) { p.target.Store(&target) }

// Target returns where new connections go.
func (p *Proxy) Target() string { return *p.target.Load() }

// Refuse turns a server that refuses connections on or off. While on,
// nothing listens on the proxy's address (a dial gets "connection
// refused") and every connection it had is closed, as a server that was
// stopped; off, it listens on the same address again (it fails tb when
// another process took the port meanwhile).
func (p *Proxy) Refuse(tb testing.TB, on bool) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || on == p.refusing {
		return
	}
	if on {
		p.refusing = true
		_ = p.ln.Close()
		p.ln = nil
		p.cutAll()
		return
	}
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ln, err = net.Listen("tcp", p.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("faultproxy: listen again on %s: %v", p.addr, err)
	}
	p.refusing = false
	p.ln = ln
	p.wg.Add(1)
	go p.acceptLoop(ln)
}

// CutAll closes every current connection, on both sides, as a dropped
// connection or server-side reset would. New connections are still accepted.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAll()
}

// cutAll is CutAll with p.mu held.
func (p *Proxy) cutAll() {
	for c := range p.conns {
		_ = c.Close()
	}
}

// ActiveConns returns the number of proxied connections currently open.
func (p *Proxy) ActiveConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active
}

// Close stops accepting, closes every connection and waits for all of the
// proxy's goroutines to end. Closing a closed proxy does nothing.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
	}
	p.cutAll()
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

func (p *Proxy) acceptLoop(ln net.Listener) {
	defer p.wg.Done()
	for {
		client, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve dials the target for client and pipes bytes both ways until either
// side closes.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second}
	server, err := d.DialContext(p.ctx, "tcp", p.Target())
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.closed || p.refusing {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.active++
	p.mu.Unlock()

	var pipes sync.WaitGroup
	pipes.Add(2)
	go p.pipe(&pipes, server, client)
	go p.pipe(&pipes, client, server)
	pipes.Wait()

	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.active--
	p.mu.Unlock()
}

// pipe copies src to dst, dropping bytes while blackholed; when src fails it
// closes both ends so the opposite pipe ends too.
func (p *Proxy) pipe(wg *sync.WaitGroup, dst, src net.Conn) {
	defer wg.Done()
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.blackhole.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
