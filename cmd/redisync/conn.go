package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultCheck bounds the first exchange with Redis when the connection's
// options give no dial timeout (go-redis's own default).
const defaultCheck = 5 * time.Second

// connFlags are the flags that say which Redis to use, shared by every
// command that talks to one: -url (or REDIS_URL), -redis, -cluster,
// -sentinel; at most one of them.
type connFlags struct {
	url, addr, cluster, sentinel string
}

// register declares the connection flags on fs.
func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "", "Redis URL, as go-redis parses it: redis://[user:password@]host:port[/db][?dial_timeout=5s...], rediss:// for TLS (default $REDIS_URL)")
	fs.StringVar(&c.addr, "redis", "", "host:port of a Redis (a Cluster node is detected); default 127.0.0.1:6379")
	fs.StringVar(&c.cluster, "cluster", "", "host:port,... of nodes of a Redis Cluster")
	fs.StringVar(&c.sentinel, "sentinel", "", "NAME@host:port,...: the master NAME, found through these Sentinels")
}

// open returns a client of the Redis the flags name, once it has answered
// a first command within the dial timeout (5s unless the URL's
// dial_timeout says otherwise): a Redis that does not answer is an error,
// never a hang. A single server that is a Cluster node gets a Cluster
// client with the same credentials. Bad flags are usage errors.
func (c connFlags) open(ctx context.Context) (redis.UniversalClient, error) {
	given := 0
	for _, v := range []string{c.url, c.addr, c.cluster, c.sentinel} {
		if v != "" {
			given++
		}
	}
	if given > 1 {
		return nil, usageErr("give one of -url, -redis, -cluster, -sentinel")
	}
	if given == 0 {
		c.url = os.Getenv("REDIS_URL")
		if c.url == "" {
			c.addr = "127.0.0.1:6379"
		}
	}
	switch {
	case c.cluster != "":
		addrs := splitAddrs(c.cluster)
		if len(addrs) == 0 {
			return nil, usageErr("-cluster names no node")
		}
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		return checked(ctx, rdb, "the Redis Cluster at "+c.cluster, defaultCheck, nil)
	case c.sentinel != "":
		master, list, ok := strings.Cut(c.sentinel, "@")
		addrs := splitAddrs(list)
		if !ok || master == "" || len(addrs) == 0 {
			return nil, usageErr("-sentinel %q: want MASTER@host:port,...", c.sentinel)
		}
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs})
		return checked(ctx, rdb, fmt.Sprintf("master %q through the Sentinels at %s", master, list), defaultCheck, nil)
	}
	o := &redis.Options{Addr: c.addr}
	what := "the Redis at " + c.addr
	if c.url != "" {
		var err error
		if o, err = redis.ParseURL(c.url); err != nil {
			return nil, usageErr("bad Redis URL %q: %v", c.url, err)
		}
		what = "the Redis at " + o.Addr
	}
	bound := o.DialTimeout
	if bound <= 0 {
		bound = defaultCheck
	}
	rdb := redis.NewClient(o)
	var cluster bool
	rc, err := checked(ctx, rdb, what, bound, func(ctx context.Context) error {
		info, err := rdb.Info(ctx, "cluster").Result()
		var refused redis.Error
		if errors.As(err, &refused) {
			// INFO refused (renamed, an ACL without it): ask a PING,
			// which says so if the credentials are what it refused.
			return rdb.Ping(ctx).Err()
		}
		cluster = err == nil && strings.Contains(info, "cluster_enabled:1")
		return err
	})
	if err != nil || !cluster {
		return rc, err
	}
	_ = rdb.Close()
	if o.DB != 0 {
		return nil, fmt.Errorf("%s is a Redis Cluster node, and a Cluster has no database %d", what, o.DB)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
	})
	return checked(ctx, cc, "the Redis Cluster at "+o.Addr, bound, nil)
}

// checked returns rdb once check (a PING when nil) has succeeded within
// bound, and closes it otherwise. The check runs in a goroutine of its own
// and is given up at the bound, whether or not the client honours
// contexts.
func checked(ctx context.Context, rdb redis.UniversalClient, what string, bound time.Duration, check func(context.Context) error) (redis.UniversalClient, error) {
	if check == nil {
		check = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- check(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("no answer within %v", bound)
	}
	if err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("cannot use %s: %w", what, err)
	}
	return rdb, nil
}

// splitAddrs splits a comma-separated list of addresses, dropping blanks.
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
