package notify

import (
	"fmt"
	"sort"
)

// ChannelState is what a Hub knows of one channel that has local waiters
// or watchers: for diagnostics and tests.
type ChannelState struct {
	Name    string
	Waiters int // goroutines waiting on it (watchers not counted)
	// Subscribed says that Redis confirmed the subscription on the
	// channel's connection and has not withdrawn it since.
	Subscribed bool
	// Ready says that the channel has been confirmed at least once.
	Ready bool
	// Node is the address of the connection it is subscribed on ("" for
	// the classic connection, and while it is not routed yet).
	Node string
}

// Channel returns the state of channel name, and false when it has no
// local waiter or watcher.
func (p *Hub) Channel(name string) (ChannelState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil {
		return ChannelState{}, false
	}
	return p.stateOf(ch), true
}

// Channels returns the state of every channel with local waiters or
// watchers, by name.
func (p *Hub) Channels() []ChannelState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ChannelState, 0, len(p.chans))
	for _, ch := range p.chans {
		out = append(out, p.stateOf(ch))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// stateOf describes ch. Called with p.mu held.
func (p *Hub) stateOf(ch *channel) ChannelState {
	s := ChannelState{Name: ch.name, Waiters: len(ch.waiters), Subscribed: p.confirmed(ch)}
	select {
	case <-ch.ready:
		s.Ready = true
	default:
	}
	if ch.conn != nil {
		s.Node = ch.conn.addr
	}
	return s
}

// Nodes returns the addresses of the open subscription connections ("" for
// the classic one), sorted.
func (p *Hub) Nodes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.conns))
	for addr := range p.conns {
		out = append(out, addr)
	}
	sort.Strings(out)
	return out
}

// Describe tells, for each open connection, what its replies say of
// channel name: for the messages of failing tests.
func (p *Hub) Describe(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := ""
	for _, c := range p.conns {
		if s := c.subs[name]; s != nil {
			out += fmt.Sprintf("[%s live=%v unsubs=%d]", c.addr, s.live, s.unsubs)
		} else {
			out += fmt.Sprintf("[%s none]", c.addr)
		}
	}
	return out
}
