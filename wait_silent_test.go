package redisync

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Lock whose only attempt never got an answer (the server accepts
// connections and never replies) ends with its context's error saying how
// long that attempt had no reply, not as a wait for a busy lock reads, and
// without the extra read a busy lock's error makes. (From a reviewer: an
// attempt dropped as its wait ended read like a busy lock's.)
func TestWaitOnSilentServerSaysNoReply(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never answered
			mu.Unlock()
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), DialTimeout: 5 * time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Mutex("silent").Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), `redisync: lock "silent": context deadline exceeded (the last attempt had no reply within`)
}
