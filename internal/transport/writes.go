package transport

import (
	"runtime"
	"strings"
	"sync/atomic"
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
// did not run it. What it cannot see, and counts: a write whose bytes
// never reached Redis (its connection failed first: go-redis encoded it,
// then failed to flush it, and writes it again), and a write whose refusal
// go-redis read and retried itself (LOADING and the like, with its
// MaxRetries). A lost hold is then reported released: the README says so.
type Writes struct{ n atomic.Int32 }

// MarshalBinary counts a write: go-redis's RESP writer encodes a
// BinaryMarshaler's bytes for every write of the command.
func (w *Writes) MarshalBinary() ([]byte, error) {
	var pc [1]uintptr
	if runtime.Callers(2, pc[:]) == 1 {
		if f := runtime.FuncForPC(pc[0]); f != nil && strings.HasSuffix(f.Name(), writerFunc) {
			w.n.Add(1)
		}
	}
	return nil, nil
}

// writerFunc is the go-redis function that encodes a command's arguments
// for the wire.
const writerFunc = "/internal/proto.(*Writer).WriteArg"

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
