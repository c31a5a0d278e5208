package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"
)

// The engine's connections are dialled from the user's client, as its own
// are: its Dialer (which on a Sentinel failover client dials the current
// primary, and otherwise the address asked, with the client's TLS
// configuration), its credentials (CredentialsProviderContext,
// CredentialsProvider or Username and Password; a streaming provider's
// current ones, a change of which retires the connections), its DB (SELECT)
// and ClientName (CLIENT SETNAME). They speak RESP2 (no HELLO), whatever
// the client speaks. Each one asks its server its role (INFO replication)
// before it takes a call: a server that is no primary is not written to
// (see follow.go). The hooks' DialHook runs around each dial.

// dialer is what the engine dials with, read from the user's client.
type dialer struct {
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	network  string
	addr     string // a single node's or a failover client's ("FailoverClient")
	username string
	password string
	creds    func() (string, string)
	credsCtx func(context.Context) (string, string, error)
	stream   auth.StreamingCredentialsProvider
	db       int
	name     string
	timeout  time.Duration
	tls      bool
	sentinel bool // a Sentinel failover client: the dialer picks the primary

	streamOnce sync.Once
	streamed   atomic.Pointer[[2]string] // the streaming provider's latest credentials
	streamErr  error
	unsub      auth.UnsubscribeFunc
	onChange   func()        // a streamed change of credentials
	gen        atomic.Uint64 // counts the streamed changes: a dial under way through one retires what it made
}

// newDialer reads rdb's options, and wraps its dial in hooks' DialHook.
func newDialer(rdb redis.UniversalClient, hooks []redis.Hook) *dialer {
	d := &dialer{network: "tcp"}
	switch r := rdb.(type) {
	case *redis.Client:
		o := r.Options()
		d.dial, d.addr = o.Dialer, o.Addr
		if o.Network != "" {
			d.network = o.Network
		}
		d.username, d.password = o.Username, o.Password
		d.creds, d.credsCtx, d.stream = o.CredentialsProvider, o.CredentialsProviderContext, o.StreamingCredentialsProvider
		d.db, d.name, d.timeout, d.tls = o.DB, o.ClientName, o.DialTimeout, o.TLSConfig != nil
		d.sentinel = o.Addr == failoverAddr
	case *redis.ClusterClient:
		o := r.Options()
		d.dial = o.Dialer
		if d.dial == nil {
			d.dial = redis.NewDialer(&redis.Options{DialTimeout: o.DialTimeout, TLSConfig: o.TLSConfig})
		}
		d.username, d.password = o.Username, o.Password
		d.creds, d.credsCtx, d.stream = o.CredentialsProvider, o.CredentialsProviderContext, o.StreamingCredentialsProvider
		d.name, d.timeout, d.tls = o.ClientName, o.DialTimeout, o.TLSConfig != nil
	}
	if d.dial == nil {
		d.dial = (&net.Dialer{}).DialContext
	}
	if d.timeout <= 0 {
		d.timeout = 5 * time.Second
	}
	for i := len(hooks) - 1; i >= 0; i-- {
		if h := hooks[i].DialHook(d.dial); h != nil {
			d.dial = h
		}
	}
	return d
}

// handshake is what a new connection learned of its server.
type handshake struct {
	replID  string
	primary bool
	known   bool // the server said its role
}

// open dials addr ("" : the client's own address) and readies the
// connection for the engine: credentials, DB, name, and the server's role.
// It returns the connection, its reader and what the server said.
func (d *dialer) open(ctx context.Context, addr string) (net.Conn, *reader, handshake, error) {
	if addr == "" {
		addr = d.addr
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	nc, err := d.dial(ctx, d.network, addr)
	if err != nil {
		return nil, nil, handshake{}, err
	}
	rd := newReader(nc)
	hs, err := d.ready(ctx, nc, rd)
	if err != nil {
		_ = nc.Close()
		return nil, nil, handshake{}, err
	}
	return nc, rd, hs, nil
}

// ready sends the connection's first commands, in one write, and reads
// their replies.
func (d *dialer) ready(ctx context.Context, nc net.Conn, rd *reader) (handshake, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
		defer nc.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(pastDeadline) })
	defer stop()
	user, pass, err := d.credentials(ctx)
	if err != nil {
		return handshake{}, fmt.Errorf("redisync: the credentials provider: %w", err)
	}
	var b []byte
	var what []string
	if pass != "" {
		if user != "" {
			b = appendCommand(b, "auth", user, pass)
		} else {
			b = appendCommand(b, "auth", pass)
		}
		what = append(what, "AUTH")
	}
	if d.db != 0 {
		b = appendCommand(b, "select", d.db)
		what = append(what, "SELECT")
	}
	if d.name != "" {
		b = appendCommand(b, "client", "setname", d.name)
		what = append(what, "CLIENT SETNAME")
	}
	b = appendCommand(b, "info", "replication")
	what = append(what, "INFO")
	if _, err := nc.Write(b); err != nil {
		return handshake{}, err
	}
	var hs handshake
	var first error
	for _, w := range what {
		v, err := rd.next()
		if err != nil {
			return handshake{}, err
		}
		switch {
		case w == "INFO" && v.kind == kindStr:
			hs.known = true
			for line := range strings.SplitSeq(v.s, "\n") {
				line = strings.TrimSpace(line)
				if r, ok := strings.CutPrefix(line, "role:"); ok {
					hs.primary = r == "master"
				} else if id, ok := strings.CutPrefix(line, "master_replid:"); ok {
					hs.replID = id
				}
			}
		case w == "INFO":
			// Refused (an ACL without INFO): its role is not known,
			// and READONLY will tell.
		case v.kind == kindErr && first == nil:
			first = fmt.Errorf("redisync: %s on a new connection: %w", w, RedisError(v.s))
		}
	}
	return hs, first
}

// credentials returns the user and password to authenticate with, as
// go-redis chooses them.
func (d *dialer) credentials(ctx context.Context) (string, string, error) {
	switch {
	case d.stream != nil:
		d.streamOnce.Do(d.subscribe)
		if d.streamErr != nil {
			return "", "", d.streamErr
		}
		c := d.streamed.Load()
		return c[0], c[1], nil
	case d.credsCtx != nil:
		return d.credsCtx(ctx)
	case d.creds != nil:
		u, p := d.creds()
		return u, p, nil
	}
	return d.username, d.password, nil
}

// subscribe subscribes to the streaming credentials provider, once.
func (d *dialer) subscribe() {
	c, unsub, err := d.stream.Subscribe(streamListener{d})
	if err != nil {
		d.streamErr = err
		return
	}
	u, p := c.BasicAuth()
	d.streamed.Store(&[2]string{u, p})
	d.unsub = unsub
}

// close unsubscribes from the streaming credentials provider.
func (d *dialer) close() {
	d.streamOnce.Do(func() {}) // no subscription after this
	if d.unsub != nil {
		_ = d.unsub()
	}
}

// streamListener hears a streaming provider's new credentials: the
// connections that used the old ones are retired (onChange), and the next
// ones authenticate with the new.
type streamListener struct{ d *dialer }

func (l streamListener) OnNext(c auth.Credentials) {
	u, p := c.BasicAuth()
	l.d.streamed.Store(&[2]string{u, p})
	l.d.gen.Add(1)
	if l.d.onChange != nil {
		l.d.onChange()
	}
}

func (l streamListener) OnError(error) {}

// isTLS reports whether nc speaks TLS (see conn.tls).
func (d *dialer) isTLS(nc net.Conn) bool {
	_, ok := nc.(*tls.Conn)
	return ok || d.tls
}
