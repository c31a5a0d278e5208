package faultproxy

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Write rules: faults on the Writes of the client's connections (see the
// package documentation's "Write rules"), applied by the connections
// DialHook wraps.

// WriteRule describes which Writes on the client's connections a write rule
// fires for and what it does to them.
type WriteRule struct {
	// Name is the command to match, case-insensitively, against the first
	// element of each RESP command in the Write: "SUBSCRIBE" matches
	// neither UNSUBSCRIBE nor SSUBSCRIBE. An empty Name matches any Write
	// holding at least one command.
	Name string
	// Args, if not nil, must also report true for the command's arguments,
	// the name first, as written (go-redis writes names in lower case). It
	// is called without any lock held, possibly concurrently.
	Args func(args []string) bool
	// Times is how many matching Writes the rule fires for, the next ones
	// from now; 0 means every matching Write, until removed.
	Times int
	// Action is what happens to a Write the rule fires for. The zero
	// WriteAction passes the Write through, so a rule with it just counts.
	Action WriteAction
}

// WriteAction is a fault applied to a Write by a write rule. Make one with
// FailWrite, DelayWrite or CloseAfterWrite.
type WriteAction struct {
	kind writeKind
	d    time.Duration
}

type writeKind int

const (
	wrNone writeKind = iota
	wrFail
	wrDelay
	wrCloseAfter
)

// FailWrite drops the Write: no byte reaches Redis, the connection is
// closed, and the Write returns a *net.OpError (Op "write", not a timeout)
// wrapping ErrInjected, as a connection dropped under the client would.
func FailWrite() WriteAction { return WriteAction{kind: wrFail} }

// DelayWrite makes the Write reach Redis d later: the Write blocks for d,
// then writes. Whatever waits on the Write waits too (e.g. PubSub.Subscribe,
// holding the PubSub's lock). The connection's write deadline keeps
// running: if it passes during the delay, the Write fails with a timeout
// and nothing is sent. Closing the connection ends the delay with an
// error.
func DelayWrite(d time.Duration) WriteAction { return WriteAction{kind: wrDelay, d: d} }

// CloseAfterWrite lets the Write reach Redis, then closes the connection:
// Redis executes the command but the client's read of the reply fails
// (typically with io.EOF or "use of closed network connection").
func CloseAfterWrite() WriteAction { return WriteAction{kind: wrCloseAfter} }

type writeRule struct {
	r    *Rule
	name string // lower case; "" for any
	args func([]string) bool
	act  WriteAction
}

// OnWrite adds a write rule to h and returns its handle.
func (h *Hook) OnWrite(wr WriteRule) *Rule {
	r := h.newRule(wr.Times)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wrRules = append(slices.Clip(h.wrRules), &writeRule{r: r, name: strings.ToLower(wr.Name), args: wr.Args, act: wr.Action})
	h.nWrite.Store(int32(len(h.wrRules)))
	return r
}

// matchWrite fires the first active rule matching a command of b and
// returns its action.
func (h *Hook) matchWrite(b []byte) (WriteAction, bool) {
	if h.nWrite.Load() == 0 {
		return WriteAction{}, false
	}
	h.mu.Lock()
	rules := h.wrRules
	h.mu.Unlock()
	cmds := parseCommands(b)
	for _, w := range rules {
		for _, args := range cmds {
			if w.name != "" && !strings.EqualFold(args[0], w.name) {
				continue
			}
			if w.args != nil && !w.args(args) {
				continue
			}
			if h.consume(w.r) {
				return w.act, true
			}
			break // rule spent or removed meanwhile
		}
	}
	return WriteAction{}, false
}

// parseCommands returns the commands (arrays of bulk strings, as go-redis
// writes them) at the start of b; a command cut short at the end of b is
// returned with its complete arguments, if it has any.
func parseCommands(b []byte) [][]string {
	var cmds [][]string
	for len(b) > 0 && b[0] == '*' {
		n, rest, ok := parseLen(b[1:])
		if !ok || n <= 0 {
			break
		}
		b = rest
		args := make([]string, 0, min(n, 8))
		complete := true
		for range n {
			if len(b) == 0 || b[0] != '$' {
				complete = false
				break
			}
			l, rest, ok := parseLen(b[1:])
			if !ok || l < 0 || len(rest) < l+2 {
				complete = false
				break
			}
			args = append(args, string(rest[:l]))
			b = rest[l+2:] // data, then CRLF
		}
		if len(args) > 0 {
			cmds = append(cmds, args)
		}
		if !complete {
			break
		}
	}
	return cmds
}

// parseLen parses the decimal number ending with CRLF at the start of b.
func parseLen(b []byte) (n int, rest []byte, ok bool) {
	i := 0
	for i < len(b) && i < 20 && b[i] != '\r' {
		i++
	}
	if i+1 >= len(b) || b[i] != '\r' || b[i+1] != '\n' {
		return 0, nil, false
	}
	n, err := strconv.Atoi(string(b[:i]))
	if err != nil {
		return 0, nil, false
	}
	return n, b[i+2:], true
}

// DialHook implements redis.Hook: it wraps every connection go-redis dials
// so that write rules apply to it. The wrapper keeps the connection's
// syscall.Conn, if it has one, so go-redis's pool health checks still
// work.
func (h *Hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := next(ctx, network, addr)
		if err != nil || nc == nil {
			return nc, err
		}
		c := &conn{Conn: nc, h: h, closed: make(chan struct{})}
		if sc, ok := nc.(syscall.Conn); ok {
			return &sysConn{conn: c, sc: sc}, nil
		}
		return c, nil
	}
}

// DialOnly returns a redis.Hook that applies h to the connections a client
// dials (write rules) but passes its commands through. Clients with
// per-node clients need it: a ClusterClient does not use the dial hooks
// added to it, its nodes dial (their PubSubs included) through their own
// hooks. Add h to the ClusterClient for command rules on the commands it
// sends in pipelines, outside all of its retries, and DialOnly to its
// nodes for write rules, before its first use:
//
//	cc.AddHook(h)
//	cc.OnNewNode(func(node *redis.Client) { node.AddHook(h.DialOnly()) })
//
// (Adding h itself to the nodes too would apply command rules twice to
// those, the second time inside the cluster's retry loop.) A redisync
// call sent alone on a Cluster goes on its master's full-duplex
// connection, which runs the node's hooks only: for command rules on
// those, add h to the nodes (cc.OnNewNode(func(node *redis.Client) {
// node.AddHook(h) })), where a rule sees each node a command is sent to.
func (h *Hook) DialOnly() redis.Hook { return dialOnly{h} }

type dialOnly struct{ h *Hook }

func (d dialOnly) DialHook(next redis.DialHook) redis.DialHook { return d.h.DialHook(next) }

func (dialOnly) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialOnly) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// conn is a dialled connection to which h's write rules apply.
type conn struct {
	net.Conn
	h         *Hook
	closeOnce sync.Once
	closed    chan struct{} // closed by Close
}

// sysConn is a conn whose underlying connection is a syscall.Conn.
type sysConn struct {
	*conn
	sc syscall.Conn
}

// SyscallConn returns the underlying connection's syscall.RawConn.
func (c *sysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// Write applies the first write rule matching b, if any, and writes b.
func (c *conn) Write(b []byte) (int, error) {
	a, ok := c.h.matchWrite(b)
	if !ok {
		return c.Conn.Write(b)
	}
	switch a.kind {
	case wrFail:
		_ = c.Close()
		return 0, c.opErr(fmt.Errorf("%w: connection dropped before the write", ErrInjected))
	case wrDelay:
		t := time.NewTimer(a.d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.closed:
			return 0, c.opErr(net.ErrClosed)
		}
		return c.Conn.Write(b)
	case wrCloseAfter:
		n, err := c.Conn.Write(b)
		_ = c.Close()
		return n, err
	default:
		return c.Conn.Write(b)
	}
}

// Close closes the connection, ending any DelayWrite in progress.
func (c *conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *conn) opErr(err error) error {
	return &net.OpError{Op: "write", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
