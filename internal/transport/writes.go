package transport

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Writes is the last argument of a release's script: it counts how many
// times go-redis wrote the command to Redis. go-redis runs a command twice
// only by writing it again (a pipeline retried after a network error, a
// command followed to another node, a full-duplex pipeline replayed), and
// every write encodes the arguments once, through its RESP writer, which
// is when writes counts (other encodings, such as an auto-pipeline sizing
// a batch, do not count). So a last release that finds its hold already
// gone in Redis knows which of the two it is: when written once, the hold
// was lost (forced by another process, lost with Redis's data, a key
// deleted) and its caller is told; when written again, it may be its own
// first write that released it, and the release succeeds, as it did; when
// no write was seen (a go-redis whose writer is not recognised), it cannot
// tell, and the release succeeds too. Redis ignores the argument (an empty
// string).
//
// A write whose reply the transport reads as a refusal (NOSCRIPT, LOADING,
// TRYAGAIN, CLUSTERDOWN, MOVED, ASK: see refused) is not counted: Redis
// did not run it. Nor is one whose refusal go-redis read and followed or
// retried itself, when the write that follows tells (see
// MarshalBinary): an ASK or a MOVED during a Cluster's resharding, on a
// master's full-duplex connection or in the cluster client's pipelines
// (TestClusterReleaseMeetsAsk: a lost hold was reported released). What
// it cannot see, and counts: a write whose bytes never reached Redis (its
// connection failed first: go-redis encoded it, then failed to flush it,
// and writes it again), and a refusal that go-redis retried itself and
// did not keep on the command. A lost hold is then reported released:
// the README says so.
type Writes struct {
	n atomic.Int32
	// cmd is the command that carries w, once made (see track); async:
	// on the full-duplex path, where reading its error blocks until its
	// reply, except on go-redis's goroutine that runs it again.
	cmd   atomic.Pointer[redis.Cmd]
	async atomic.Bool
	// diverted: a write of it went off its full-duplex connection.
	diverted atomic.Bool
}

// MarshalBinary counts a write: go-redis's RESP writer encodes a
// BinaryMarshaler's bytes for every write of the command. A write that
// go-redis makes after a reply that refused the command, which it
// follows or retries itself, takes the refused write's place: on the
// full-duplex path, the first write off the connection (go-redis takes a
// command off it only for a reply that refused it: MOVED, ASK, TRYAGAIN,
// LOADING, ...), and on every path a write of a command that still holds
// such a reply (go-redis keeps the reply it follows on the command until
// the next one).
func (w *Writes) MarshalBinary() ([]byte, error) {
	var pcs [48]uintptr
	if runtime.Callers(2, pcs[:1]) == 0 || frameOf(pcs[0]) != frameWriter {
		return nil, nil
	}
	cmd := w.cmd.Load()
	if cmd == nil {
		w.n.Add(1)
		return nil, nil
	}
	if w.async.Load() {
		// The rest of the stack, read only here: who called the writer.
		n := runtime.Callers(3, pcs[:])
		diverted := false
	frames:
		for _, pc := range pcs[:n] {
			switch frameOf(pc) {
			case frameDivert:
				diverted = true
				break frames
			case frameFDWriter:
				break frames
			}
		}
		switch {
		case !diverted:
			// On the connection: its error is not to be read here.
			w.n.Add(1)
			return nil, nil
		case w.diverted.CompareAndSwap(false, true):
			return nil, nil // in place of the refused write on the connection
		}
	}
	if !refusal(cmd.Err()) {
		w.n.Add(1)
	}
	return nil, nil
}

// track has w know the command that carries it (async: a command on the
// full-duplex path), made for a send of its call.
func (w *Writes) track(cmd *redis.Cmd, async bool) {
	w.async.Store(async)
	w.diverted.Store(false)
	w.cmd.Store(cmd)
}

// trackWrites has the Writes among k's arguments know cmd (see track).
func trackWrites(k *Call, cmd *redis.Cmd, async bool) {
	for _, a := range k.Args {
		if w, ok := a.(*Writes); ok {
			w.track(cmd, async)
		}
	}
}

// refusal reports a reply by which Redis refused a command without
// running it, which go-redis follows or retries itself.
func refusal(err error) bool {
	if notNow(err) || isRedirect(err) {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "READONLY") || strings.HasPrefix(msg, "MASTERDOWN") || strings.HasPrefix(msg, "NOREPLICAS")
}

// The go-redis functions MarshalBinary looks for on its stack: the one
// that encodes a command's arguments for the wire, the one that runs a
// command of the full-duplex path again off its connection, and the one
// that writes on that connection.
const (
	writerFunc   = "/internal/proto.(*Writer).WriteArg"
	divertFunc   = ".(*fdEngine).retryOnNormalConn.func1"
	fdWriterFunc = ".(*fdEngine).writeBatch"
)

const (
	frameOther = iota + 1
	frameWriter
	frameDivert
	frameFDWriter
)

// frames caches frameOf's answers, by program counter.
var frames sync.Map

// frameOf tells which of the functions MarshalBinary looks for pc is in.
func frameOf(pc uintptr) int {
	if k, ok := frames.Load(pc); ok {
		return k.(int)
	}
	k := frameOther
	if f := runtime.FuncForPC(pc); f != nil {
		switch name := f.Name(); {
		case strings.HasSuffix(name, writerFunc):
			k = frameWriter
		case strings.HasSuffix(name, divertFunc):
			k = frameDivert
		case strings.HasSuffix(name, fdWriterFunc):
			k = frameFDWriter
		}
	}
	frames.Store(pc, k)
	return k
}

// String is what hooks that print commands show; it counts nothing.
func (w *Writes) String() string { return "" }

// Again reports whether the command was not seen written exactly once.
func (w *Writes) Again() bool { return w.n.Load() != 1 }

// refused forgets the write of a call that Redis refused without running
// it (NOSCRIPT, LOADING, TRYAGAIN, CLUSTERDOWN, MOVED, ASK: the reply the
// transport read), before the call is sent again: that write, the latest,
// is no longer counted, and every earlier one is, as it may have run (a
// write whose reply was lost with its connection, which go-redis wrote
// again). A refusal go-redis read and retried itself (LOADING and the
// like, with MaxRetries) is not seen here: those writes stay counted.
func refused(k *Call) {
	for _, a := range k.Args {
		if w, ok := a.(*Writes); ok && w.n.Load() > 0 {
			w.n.Add(-1)
		}
	}
}

// Counted returns k with a Writes argument last, and that argument.
func Counted(k Call) (Call, *Writes) {
	w := &Writes{}
	k.Args = append(k.Args[:len(k.Args):len(k.Args)], w)
	return k, w
}
