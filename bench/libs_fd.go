package main

import (
	"context"
	"fmt"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// ---- bsm/redislock over go-redis's full-duplex AutoPipeline ----
//
// A yardstick for a send path that writes continuously on one held
// connection: go-redis v9.23's blocking AutoPipeline with FullDuplex (a
// writer and a reader goroutine on one pipeline-pool connection; a command is
// written while others are in flight). redislock takes a redis.Scripter,
// which *redis.AutoPipeliner implements (it implements redis.Cmdable).
//
// Requests are counted by a wrapper of that Scripter, not by a go-redis hook:
// on the full-duplex path a process hook makes go-redis run each command's
// hook chain on a goroutine of its own (AutoPipelineOptions.FullDuplex's
// doc), which would change what is measured. So this row's requests are
// commands submitted (like rueidis's), not round trips.

// fdOptions is the full-duplex configuration; the rest are go-redis's defaults.
func fdOptions() *redis.AutoPipelineOptions { return &redis.AutoPipelineOptions{FullDuplex: true} }

// autoPipelined is a go-redis client with an auto-pipeline: *redis.Client,
// or *redis.ClusterClient (its full-duplex path routes each command to its
// slot's master).
type autoPipelined interface {
	redis.UniversalClient
	AutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error)
}

type redislockFDInst struct {
	rdbs  []redis.UniversalClient
	aps   []*redis.AutoPipeliner
	cs    []*redislock.Client
	retry redislock.RetryStrategy
}

func newRedislockFD(retry redislock.RetryStrategy) func(instOpts) (inst, error) {
	return func(o instOpts) (inst, error) {
		in := &redislockFDInst{retry: retry}
		for i := range o.n {
			rdb := newGoRedisFor(o, nil, o.clientName(i))
			apc, ok := rdb.(autoPipelined)
			if !ok {
				_ = rdb.Close()
				in.close()
				return nil, fmt.Errorf("%T has no auto-pipeline", rdb)
			}
			ap, err := apc.AutoPipelineWithOptions(fdOptions())
			if err != nil {
				_ = rdb.Close()
				in.close()
				return nil, err
			}
			var s redis.Scripter = ap
			if o.cnt != nil {
				s = &countedScripter{Scripter: ap, c: o.cnt}
			}
			in.rdbs = append(in.rdbs, rdb)
			in.aps = append(in.aps, ap)
			in.cs = append(in.cs, redislock.New(s))
		}
		return in, nil
	}
}

func (in *redislockFDInst) locker(i int, name string) locker {
	return &redislockLocker{c: in.cs[i], name: name, opt: &redislock.Options{RetryStrategy: in.retry}}
}

func (in *redislockFDInst) close() {
	for i := range in.rdbs {
		_ = in.aps[i].Close()
		_ = in.rdbs[i].Close()
	}
}

// countedScripter counts every script call as one request (and one command).
type countedScripter struct {
	redis.Scripter
	c *counter
}

func (s *countedScripter) count() { s.c.reqs.Add(1); s.c.cmds.Add(1) }

func (s *countedScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	s.count()
	return s.Scripter.Eval(ctx, script, keys, args...)
}

func (s *countedScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	s.count()
	return s.Scripter.EvalSha(ctx, sha1, keys, args...)
}

func (s *countedScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	s.count()
	return s.Scripter.EvalRO(ctx, script, keys, args...)
}

func (s *countedScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	s.count()
	return s.Scripter.EvalShaRO(ctx, sha1, keys, args...)
}

func (s *countedScripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	s.count()
	return s.Scripter.ScriptExists(ctx, hashes...)
}

func (s *countedScripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	s.count()
	return s.Scripter.ScriptLoad(ctx, script)
}
