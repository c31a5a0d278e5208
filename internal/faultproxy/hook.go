package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hook injects faults at the go-redis level. It is a redis.Hook: install it
// with AddHook on a redis.Client (or ClusterClient, see DialOnly), then add
// rules with OnCommand and OnWrite at any time; remove them with
// Rule.Remove or Clear. A Hook may be installed on several clients. Its
// methods are safe for concurrent use.
//
// # Where the hook sits
//
// go-redis runs the hooks added with AddHook outside its retry loops:
//
//   - On a redis.Client, ProcessHook and ProcessPipelineHook wrap the whole
//     of Process / Pipeline.Exec, including the MaxRetries loop (which
//     resends a command after io.EOF, a reset connection, a timeout on
//     write, a pool timeout, LOADING, READONLY... see go-redis's
//     shouldRetry). So the hook sees each command (or pipeline) once per
//     call, whatever go-redis retries underneath, and an error the hook
//     makes up (LoseReply, Fail) reaches the caller as is: go-redis does not
//     retry it.
//   - On a redis.ClusterClient they also wrap the cluster's MOVED/ASK and
//     retry loop (MaxRedirects) and the node client's own retries.
//   - The connection wrapper installed by DialHook sits at the very bottom,
//     inside every retry loop: a failed Write (FailWrite) is a network
//     error to go-redis, which retries an ordinary command on another
//     connection (unless MaxRetries < 0); PubSub commands are not retried.
//
// # Command rules
//
// Command rules (OnCommand) act in ProcessHook and ProcessPipelineHook. They
// see the commands the caller issues and, as go-redis runs them through the
// client's hooks too, the handshake of each new connection (HELLO, CLIENT
// MAINT_NOTIFICATIONS, then CLIENT SETINFO twice as a pipeline; a PubSub's
// connection included), nested in the call of the command that needed the
// connection, hence inside that command's retries. The commands of a PubSub
// (SUBSCRIBE, UNSUBSCRIBE, PING...) do not pass through ProcessHook: use
// write rules (OnWrite) for those.
//
// For each command, the first active rule (in the order added) whose name
// and Args match fires: its use count goes down, its Fired count up, and
// its Action applies. Other rules are not consulted for that command.
//
// # Write rules
//
// DialHook wraps the net.Conn of every connection the client dials after
// the Hook was added (earlier connections are left alone), including the
// dedicated connection of a PubSub. Write rules (OnWrite) are matched
// against the commands, in RESP, of each Write on such a connection; one
// firing applies to the whole Write. go-redis writes a command (or a whole
// pipeline) in one Write unless it exceeds its write buffer (by default
// 32 KiB, 128 KiB for pipelines); a command split across Writes can only
// match in its first Write, with the arguments that Write holds in full.
//
// A ClusterClient uses neither the dial hooks added to it nor, for its
// nodes' handshakes, its command hooks: see DialOnly.
type Hook struct {
	mu       sync.Mutex
	cmdRules []*cmdRule   // copy-on-write: readers may keep a snapshot
	wrRules  []*writeRule // copy-on-write: readers may keep a snapshot
	nWrite   atomic.Int32 // len(wrRules), to skip parsing writes when 0
}

// NewHook returns a Hook with no rules: until rules are added it passes
// every command and write through unchanged.
func NewHook() *Hook { return &Hook{} }

// ErrInjected is wrapped by every error the Hook makes up (LoseReply, a
// default Fail, FailWrite), so tests can tell them with errors.Is.
var ErrInjected = errors.New("faultproxy: injected fault")

// Rule is the handle of a rule added to a Hook, to count its firings and
// remove it. Its methods are safe for concurrent use.
type Rule struct {
	h       *Hook
	left    int // uses left; -1 for unlimited. Guarded by h.mu, like below.
	fired   int
	removed bool
}

// Fired returns how many times the rule has fired so far.
func (r *Rule) Fired() int {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	return r.fired
}

// Remove deactivates the rule: it fires no more (a command or Write it
// already fired for still gets its fault). Removing twice does nothing.
func (r *Rule) Remove() {
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	r.removed = true
	h.cmdRules = slices.DeleteFunc(slices.Clone(h.cmdRules), func(c *cmdRule) bool { return c.r == r })
	h.wrRules = slices.DeleteFunc(slices.Clone(h.wrRules), func(w *writeRule) bool { return w.r == r })
	h.nWrite.Store(int32(len(h.wrRules)))
}

// Clear removes every rule of the Hook.
func (h *Hook) Clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.cmdRules {
		c.r.removed = true
	}
	for _, w := range h.wrRules {
		w.r.removed = true
	}
	h.cmdRules, h.wrRules = nil, nil
	h.nWrite.Store(0)
}

// newRule returns a rule allowed times uses (0: unlimited).
func (h *Hook) newRule(times int) *Rule {
	if times < 0 {
		panic(fmt.Sprintf("faultproxy: negative Times %d", times))
	}
	left := times
	if times == 0 {
		left = -1
	}
	return &Rule{h: h, left: left}
}

// consume fires r if it is still active, reporting whether it did.
func (h *Hook) consume(r *Rule) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.removed || r.left == 0 {
		return false
	}
	if r.left > 0 {
		r.left--
	}
	r.fired++
	return true
}

// ---------------------------------------------------------------------------
// Command rules

// CommandRule describes which commands a command rule fires for and what it
// does to them.
type CommandRule struct {
	// Name is the command to match, case-insensitively, as go-redis's
	// Cmder.Name reports it: the first word ("evalsha", "set", "client").
	// An empty Name matches every command, handshakes included (see Hook).
	Name string
	// Args, if not nil, must also report true for the command's arguments
	// (Cmder.Args: the name first, as go-redis will send them). It is
	// called without any lock held, possibly concurrently, and must not
	// modify args. See RunsScript.
	Args func(args []any) bool
	// Times is how many matching commands the rule fires for, the next
	// ones from now; 0 means every matching command, until removed.
	Times int
	// Action is what happens to a command the rule fires for. The zero
	// Action does nothing, so a rule with it just counts commands.
	Action Action
}

// Action is a fault applied to a command by a command rule. Make one with
// DelayBefore, DelayReply, HoldReply, Resend, LoseReply or Fail.
type Action struct {
	kind    actionKind
	d       time.Duration
	release <-chan struct{} // HoldReply's
	err     error
}

type actionKind int

const (
	actNone actionKind = iota
	actDelayBefore
	actDelayReply
	actResend
	actLoseReply
	actFail
)

// DelayBefore waits d before the command is sent. If ctx ends first, the
// command is not sent and the caller gets ctx.Err(). In a pipeline, the
// whole pipeline waits for the longest DelayBefore of its commands.
func DelayBefore(d time.Duration) Action { return Action{kind: actDelayBefore, d: d} }

// DelayReply runs the command normally, then holds its reply for d before
// returning it: its effect is visible in Redis during the delay. The
// connection is back in go-redis's pool meanwhile, and go-redis's
// ReadTimeout does not apply to the delay. If ctx ends first, the caller
// gets ctx.Err() (the command has run). In a pipeline, all the replies are
// held for the longest DelayReply of its commands.
func DelayReply(d time.Duration) Action { return Action{kind: actDelayReply, d: d} }

// HoldReply is DelayReply until release is closed rather than for a time:
// a test can then order what it checks before the reply (every other call
// finished while it was held) without a clock, which a busy machine would
// stretch. In a pipeline, all the replies are held until every matched
// command's release is closed (and any DelayReply is over).
func HoldReply(release <-chan struct{}) Action {
	return Action{kind: actDelayReply, release: release}
}

// Resend runs the command twice, one after the other, and gives the caller
// only the second reply: what happens when go-redis resends a command after
// a network error although Redis had executed the first send. In a
// pipeline, the whole pipeline is run twice, as go-redis's pipeline retry
// would resend it (for a TxPipeline, the whole MULTI/EXEC block).
func Resend() Action { return Action{kind: actResend} }

// LoseReply runs the command in Redis but replaces its reply by an error,
// as if the connection had dropped before the reply arrived. The error is
// a *net.OpError (Op "read", so a net.Error whose Timeout() is false) that
// wraps both ErrInjected and io.EOF: errors.Is(err, io.EOF) holds, as for
// the io.EOF go-redis returns when Redis closes a connection. go-redis does
// not retry it (see Hook) and keeps using the connection, which is healthy.
// In a pipeline, only the matched commands get the error.
func LoseReply() Action { return Action{kind: actLoseReply} }

// Fail does not send the command: the caller gets err, or an error
// wrapping ErrInjected if err is nil. In a pipeline, the other commands are
// sent without it.
func Fail(err error) Action {
	if err == nil {
		err = fmt.Errorf("%w: command not sent", ErrInjected)
	}
	return Action{kind: actFail, err: err}
}

func lostReplyErr() error {
	return &net.OpError{Op: "read", Net: "tcp", Err: fmt.Errorf("%w: reply lost: %w", ErrInjected, io.EOF)}
}

type cmdRule struct {
	r    *Rule
	name string // lower case; "" for any
	args func([]any) bool
	act  Action
}

// OnCommand adds a command rule to h and returns its handle.
func (h *Hook) OnCommand(cr CommandRule) *Rule {
	r := h.newRule(cr.Times)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmdRules = append(slices.Clip(h.cmdRules), &cmdRule{r: r, name: strings.ToLower(cr.Name), args: cr.Args, act: cr.Action})
	return r
}

// matchCommand fires the first active rule matching cmd and returns its
// action.
func (h *Hook) matchCommand(cmd redis.Cmder) (Action, bool) {
	h.mu.Lock()
	rules := h.cmdRules
	h.mu.Unlock()
	if len(rules) == 0 {
		return Action{}, false
	}
	name := cmd.Name()
	for _, c := range rules {
		if c.name != "" && c.name != name {
			continue
		}
		if c.args != nil && !c.args(cmd.Args()) {
			continue
		}
		if h.consume(c.r) {
			return c.act, true
		}
	}
	return Action{}, false
}

// ProcessHook implements redis.Hook: it applies command rules to commands
// run one at a time.
func (h *Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a, ok := h.matchCommand(cmd)
		if !ok {
			return next(ctx, cmd)
		}
		switch a.kind {
		case actDelayBefore:
			if err := sleep(ctx, a.d); err != nil {
				cmd.SetErr(err)
				return err
			}
			return next(ctx, cmd)
		case actDelayReply:
			err := next(ctx, cmd)
			if serr := hold(ctx, a.d, a.release); serr != nil {
				cmd.SetErr(serr)
				return serr
			}
			return err
		case actResend:
			_ = next(ctx, cmd)
			cmd.SetErr(nil)
			return next(ctx, cmd)
		case actLoseReply:
			_ = next(ctx, cmd)
			err := lostReplyErr()
			cmd.SetErr(err)
			return err
		case actFail:
			cmd.SetErr(a.err)
			return a.err
		default:
			return next(ctx, cmd)
		}
	}
}

// ProcessPipelineHook implements redis.Hook: it applies command rules to
// each command of a pipeline (Pipeline and TxPipeline; a TxPipeline's
// commands include its MULTI and EXEC). See each Action for how it applies
// to pipelines.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var (
			before, after time.Duration
			releases      []<-chan struct{}
			resend        bool
			lost          []redis.Cmder
			matched       bool
		)
		send := make([]redis.Cmder, 0, len(cmds))
		for _, cmd := range cmds {
			a, ok := h.matchCommand(cmd)
			if !ok {
				send = append(send, cmd)
				continue
			}
			matched = true
			switch a.kind {
			case actDelayBefore:
				before = max(before, a.d)
			case actDelayReply:
				after = max(after, a.d)
				if a.release != nil {
					releases = append(releases, a.release)
				}
			case actResend:
				resend = true
			case actLoseReply:
				lost = append(lost, cmd)
			case actFail:
				cmd.SetErr(a.err)
				continue // not sent
			}
			send = append(send, cmd)
		}
		if !matched {
			return next(ctx, cmds)
		}

		if err := sleep(ctx, before); err != nil {
			for _, cmd := range send {
				cmd.SetErr(err)
			}
			return err
		}
		var err error
		if len(send) > 0 {
			err = next(ctx, send)
			if resend {
				for _, cmd := range send {
					cmd.SetErr(nil)
				}
				err = next(ctx, send)
			}
		}
		serr := sleep(ctx, after)
		for _, r := range releases {
			if serr == nil {
				serr = hold(ctx, 0, r)
			}
		}
		if serr != nil {
			for _, cmd := range send {
				cmd.SetErr(serr)
			}
			return serr
		}
		for _, cmd := range lost {
			cmd.SetErr(lostReplyErr())
		}
		// Like go-redis: the first command error, in pipeline order.
		for _, cmd := range cmds {
			if cerr := cmd.Err(); cerr != nil {
				return cerr
			}
		}
		return err
	}
}

// RunsScript returns a CommandRule.Args predicate matching the commands
// that run script s: EVALSHA and EVALSHA_RO whose SHA1 is s.Hash() (as
// s.Run and s.EvalSha send), EVAL and EVAL_RO whose source is s's (as the
// NOSCRIPT fallback of s.Run and s.Eval send). Set CommandRule.Name to
// "evalsha" or "eval" as well to match only one of them.
func RunsScript(s *redis.Script) func(args []any) bool {
	var sc srcCapture
	_ = s.Eval(context.Background(), &sc, nil) // learns s's source
	src := sc.src
	return func(args []any) bool {
		if len(args) < 2 {
			return false
		}
		name, _ := args[0].(string)
		body, _ := args[1].(string)
		switch strings.ToLower(name) {
		case "evalsha", "evalsha_ro":
			sha := s.Hash() // may change once: see redis.NewScriptServerSHA
			return sha != "" && strings.EqualFold(body, sha)
		case "eval", "eval_ro":
			return body == src
		}
		return false
	}
}

// srcCapture is a redis.Scripter that records the source Script.Eval
// passes it, since redis.Script does not expose its source.
type srcCapture struct{ src string }

func (c *srcCapture) Eval(ctx context.Context, script string, _ []string, _ ...any) *redis.Cmd {
	c.src = script
	return redis.NewCmd(ctx)
}

func (c *srcCapture) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmd(ctx)
}

func (c *srcCapture) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmd(ctx)
}

func (c *srcCapture) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmd(ctx)
}

func (c *srcCapture) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceCmd(ctx)
}

func (c *srcCapture) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

// hold waits d, then for release to be closed if it is not nil; less if
// ctx ends first (then it returns ctx.Err()).
func hold(ctx context.Context, d time.Duration, release <-chan struct{}) error {
	if err := sleep(ctx, d); err != nil || release == nil {
		return err
	}
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits d, or less if ctx ends first (then it returns ctx.Err()).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
