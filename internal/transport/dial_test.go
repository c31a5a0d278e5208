package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// The engine's connections are dialled as the user's client dials its
// own: credentials, DB, name, TLS through its dialer.

// withPassword sets srv's default user's password.
func withPassword(t *testing.T, srv *redistest.Server, pass string) {
	admin := srv.Client(t)
	require.NoError(t, admin.ConfigSet(context.Background(), "requirepass", pass).Err())
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: pass})
		defer c.Close()
		_ = c.ConfigSet(context.Background(), "requirepass", "").Err()
	})
}

func TestDialAuthPassword(t *testing.T) {
	srv := redistest.Start(t)
	withPassword(t, srv, "s3cret")
	bg := context.Background()
	good := newT(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "s3cret"}), Options{})
	locked(t, good.Do(bg, lockCall("d:pw"), nil))

	bad := newT(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "wrong"}), Options{})
	ctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	r := bad.Do(ctx, lockCall("d:pw2"), nil)
	require.ErrorIs(t, r.Err(), ErrNotSent)
	assert.Contains(t, r.Err().Error(), "AUTH", "what the wire said")
	assert.False(t, r.Written())
}

func TestDialACLUserAndCredentialsProviders(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	admin := srv.Client(t)
	require.NoError(t, admin.Do(bg, "acl", "setuser", "alice", "on", ">alicepw", "~*", "&*", "+@all").Err())
	require.NoError(t, admin.Do(bg, "acl", "setuser", "default", "off").Err())
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "alice", Password: "alicepw"})
		defer c.Close()
		_ = c.Do(bg, "acl", "setuser", "default", "on").Err()
	})
	whoami := func(tr *Transport) string {
		v, err := tr.Do(bg, Call{Keys: []string{"x"}, Args: []any{"acl", "whoami"}}, nil).Text()
		require.NoError(t, err)
		return v
	}
	plain := newT(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "alice", Password: "alicepw"}), Options{})
	assert.Equal(t, "alice", whoami(plain))

	var asked atomic.Int32
	prov := newT(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), CredentialsProvider: func() (string, string) {
		asked.Add(1)
		return "alice", "alicepw"
	}}), Options{})
	assert.Equal(t, "alice", whoami(prov))
	assert.Positive(t, asked.Load())

	ctxProv := newT(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), CredentialsProviderContext: func(context.Context) (string, string, error) {
		return "alice", "alicepw", nil
	}}), Options{})
	assert.Equal(t, "alice", whoami(ctxProv))

	// A streaming provider: its new credentials retire the connections,
	// and the next ones authenticate with them.
	require.NoError(t, admin.Do(bg, "acl", "setuser", "bob", "on", ">bobpw", "~*", "&*", "+@all").Err())
	sp := &streamProv{user: "alice", pass: "alicepw"}
	stream := newT(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), StreamingCredentialsProvider: sp}), Options{})
	assert.Equal(t, "alice", whoami(stream))
	sp.change("bob", "bobpw")
	require.Eventually(t, func() bool { return whoami(stream) == "bob" }, 5*time.Second, 10*time.Millisecond)
}

// A streamed change while a connection is being dialled, after it sent the
// old credentials: the connection is retired once it is added, and the
// calls go on the next ones, with the new credentials.
func TestDialStreamedChangeDuringDial(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	admin := srv.Client(t)
	for _, u := range []string{"alice", "bob"} {
		require.NoError(t, admin.Do(bg, "acl", "setuser", u, "on", ">"+u+"pw", "~*", "&*", "+@all").Err())
	}
	gate := make(chan struct{})
	var held atomic.Bool
	held.Store(true)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil || !held.Load() {
			return nc, err
		}
		return &gatedRead{Conn: nc, gate: gate}, nil
	}
	sp := &streamProv{user: "alice", pass: "alicepw"}
	tr := newT(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), StreamingCredentialsProvider: sp, Dialer: dial}), Options{})
	whoami := func() string {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		v, err := tr.Do(ctx, Call{Keys: []string{"x"}, Args: []any{"acl", "whoami"}}, nil).Text()
		require.NoError(t, err)
		return v
	}
	first := make(chan string, 1)
	go func() { first <- whoami() }()
	// The first dial sent alice's AUTH and waits for its reply.
	time.Sleep(200 * time.Millisecond)
	held.Store(false)
	sp.change("bob", "bobpw")
	close(gate)
	select {
	case <-first:
	case <-time.After(5 * time.Second):
		t.Fatal("the first call did not end")
	}
	for i := range 20 {
		require.Equal(t, "bob", whoami(), "call %d after the change", i)
	}
}

// gatedRead is a connection whose reads wait until gate is closed.
type gatedRead struct {
	net.Conn
	gate chan struct{}
}

func (g *gatedRead) Read(b []byte) (int, error) {
	<-g.gate
	return g.Conn.Read(b)
}

// streamProv is a streaming credentials provider whose credentials change
// when the test says.
type streamProv struct {
	mu         sync.Mutex
	user, pass string
	ls         []auth.CredentialsListener
}

func (p *streamProv) Subscribe(l auth.CredentialsListener) (auth.Credentials, auth.UnsubscribeFunc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ls = append(p.ls, l)
	return auth.NewBasicCredentials(p.user, p.pass), func() error { return nil }, nil
}

func (p *streamProv) change(user, pass string) {
	p.mu.Lock()
	p.user, p.pass = user, pass
	ls := append([]auth.CredentialsListener(nil), p.ls...)
	p.mu.Unlock()
	for _, l := range ls {
		l.OnNext(auth.NewBasicCredentials(user, pass))
	}
}

func TestDialDBAndName(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	tr := newT(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 3, ClientName: "redisync-engine"}), Options{})
	locked(t, tr.Do(bg, lockCall("d:db"), nil))
	db3 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 3})
	defer db3.Close()
	assert.EqualValues(t, 1, db3.Exists(bg, "d:db").Val(), "in DB 3")
	assert.EqualValues(t, 0, srv.Client(t).Exists(bg, "d:db").Val(), "not in DB 0")
	list := srv.Client(t).ClientList(bg).Val()
	assert.Contains(t, list, "name=redisync-engine")
}

// TLS: through the user's own Dialer, and through go-redis's TLSConfig.
func TestDialTLS(t *testing.T) {
	srv := redistest.Start(t)
	addr, pool := tlsProxy(t, srv.Addr())
	bg := context.Background()
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	var dials atomic.Int32
	viaDialer := redis.NewClient(&redis.Options{Addr: addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { _ = viaDialer.Close() })
	tr := newT(t, viaDialer, Options{})
	locked(t, tr.Do(bg, lockCall("d:tls1"), nil))
	assert.Positive(t, dials.Load(), "the user's dialer")

	viaConfig := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg})
	t.Cleanup(func() { _ = viaConfig.Close() })
	tr2 := newT(t, viaConfig, Options{})
	locked(t, tr2.Do(bg, lockCall("d:tls2"), nil))

	// A caller leaves a TLS connection when its context ends, and the
	// connection still serves the next call.
	srv.Pause()
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	r := tr2.Do(ctx, lockCall("d:tls3"), nil)
	cancel()
	srv.Resume()
	assert.True(t, r.Gone)
	locked(t, tr2.Do(bg, lockCall("d:tls4"), nil))
}

// tlsProxy serves TLS on a loopback port, forwarding the plain bytes to
// target, and returns its address and the pool that trusts it.
func tlsProxy(t *testing.T, target string) (string, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return ln.Addr().String(), pool
}
