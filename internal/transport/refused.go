package transport

import (
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Refused reports whether err, a call's error, says that the call surely
// did not run in Redis: it reached no server, or the server refused it
// before running anything of it. The layers above keep such a call (a
// release) and send it again later, where a call that may have run (a
// reset or an EOF after its bytes may have been written, a reply that
// did not come in time) is not known to be refused.
//
// It reads the errors: a dial that failed (a
// *net.OpError whose Op is "dial", a connection refused), no connection
// to be had from the pool in time, the call not sent at all (ErrNotSent),
// go-redis's Sentinel client finding no primary (every Sentinel
// unreachable, or none knows a primary), and the replies by which a
// server refuses a command before running it: READONLY (a replica),
// LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, NOREPLICAS, BUSY (a script
// runs), NOSCRIPT, MOVED, ASK, and a server at its client limit. A
// script that stops at a refused write (READONLY inside it) ran nothing
// that changed Redis: replicas refuse every write.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrNotSent) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	msg := err.Error()
	if strings.Contains(msg, "all sentinels specified in configuration are unreachable") || strings.Contains(msg, "no master") {
		return true // the Sentinels' own answers (redis.Nil: no primary known) are in its chain
	}
	var re redis.Error
	if errors.As(err, &re) {
		return refusedReply(re.Error())
	}
	return refusedReply(msg)
}

// refusedReply reports whether msg is the text of a reply by which Redis
// refused a command before running it (see Refused).
func refusedReply(msg string) bool {
	for _, p := range refusedPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// refusedPrefixes open the replies that refuse a command unrun.
var refusedPrefixes = []string{"READONLY ", "LOADING ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ",
	"NOREPLICAS ", "BUSY ", "NOSCRIPT ", "MOVED ", "ASK ", "ERR max number of clients reached"}

// Refused reports whether r's call surely did not run: the engine knows
// whether it was written (a call not written did not run, whatever the
// error; its caller may have left first) and what Redis answered (a reply
// that refuses it unrun: see the function Refused). Not when its caller
// left while it was on its way (Gone), nor when it was written and its
// reply lost.
func (r Reply) Refused() bool {
	switch {
	case r.err == nil || r.Gone:
		return false
	case !r.written:
		return true
	case r.answered:
		var re redis.Error
		return errors.As(r.err, &re) && refusedReply(re.Error())
	}
	return false
}
