package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// ---------------------------------------------------------------------------
// Link latency: every Redis connection of the libraries under test (and of
// the yardsticks) goes through an in-process toxiproxy whose downstream — the
// replies — carries a latency toxic. One proxy per Redis node, made on the
// first dial to that node; the clients keep the nodes' real addresses and
// only their dial functions are redirected, so a Cluster's CLUSTER SLOTS and
// MOVED addresses reach the proxies too. The harness's own clients (INFO,
// CLIENT LIST, cluster set-up, replication) dial directly.

// link is one link latency's set of proxies; nil means loopback, no proxy.
type link struct {
	latency time.Duration
	srv     *toxiproxy.ApiServer
	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy // by the node's real address
}

// parseLatencies reads -latency: a comma-separated list of durations ("0",
// "1ms", "5ms"), each one a pass over the scenarios.
func parseLatencies(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if f == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil {
			return nil, fmt.Errorf("-latency: %w", err)
		}
		// toxiproxy's latency toxic takes whole milliseconds; and a finer
		// delay could not be kept anyway: Go's timers wake at best about
		// every millisecond on an idle Linux process (a 100 µs sleep took
		// 1.08 ms at p50 on the 2-core machine), so 300 µs would come out as
		// a millisecond.
		if d < 0 || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("-latency: %v: want 0 or whole milliseconds (toxiproxy's latency toxic, Go's timer resolution)", d)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		out = []time.Duration{0}
	}
	return out, nil
}

// newLink returns nil for 0 (loopback, as without the flag).
func newLink(latency time.Duration) *link {
	if latency <= 0 {
		return nil
	}
	return &link{
		latency: latency,
		srv:     toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: map[string]*toxiproxy.Proxy{},
	}
}

// describe is the header line of the link.
func (l *link) describe() string {
	if l == nil {
		return linkText(0)
	}
	return linkText(l.latency)
}

// linkText describes the link of a latency.
func linkText(latency time.Duration) string {
	if latency <= 0 {
		return "loopback, no proxy"
	}
	return fmt.Sprintf("loopback through an in-process toxiproxy per Redis node, %s added to every reply (toxiproxy's `latency` toxic on the downstream)", latency)
}

// through returns the address of the proxy in front of addr, starting it on
// first use.
func (l *link) through(addr string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.proxies[addr]; p != nil {
		return p.Listen, nil
	}
	p := toxiproxy.NewProxy(l.srv, "redis-"+addr, "127.0.0.1:0", addr)
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("toxiproxy for %s: %w", addr, err)
	}
	js := fmt.Sprintf(`{"name": "link", "type": "latency", "stream": "downstream", "toxicity": 1, "attributes": {"latency": %d}}`,
		l.latency.Milliseconds())
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		p.Stop()
		return "", fmt.Errorf("toxiproxy for %s: latency toxic: %w", addr, err)
	}
	l.proxies[addr] = p
	return p.Listen, nil
}

// dial connects to addr's proxy.
func (l *link) dial(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
	to, err := l.through(addr)
	if err != nil {
		return nil, err
	}
	return d.DialContext(ctx, "tcp", to)
}

// goRedisDialer is a go-redis Options.Dialer through the link; nil (go-redis's
// own dialer) on loopback.
func (l *link) goRedisDialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if l == nil {
		return nil
	}
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		return l.dial(ctx, &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}, addr)
	}
}

// rueidisDial is a rueidis ClientOption.DialCtxFn through the link; nil on
// loopback.
func (l *link) rueidisDial() func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	if l == nil {
		return nil
	}
	return func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		return l.dial(ctx, d, addr)
	}
}

// close stops the proxies and closes their connections.
func (l *link) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.proxies {
		p.Stop()
	}
	l.proxies = map[string]*toxiproxy.Proxy{}
}
