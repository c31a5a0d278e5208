package redisync

import (
	"runtime"
	"strings"
	"sync/atomic"
)

// writes is the last argument of a release's script: it counts how many
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
type writes struct{ n atomic.Int32 }

// MarshalBinary counts a write: go-redis's RESP writer encodes a
// BinaryMarshaler's bytes for every write of the command.
func (w *writes) MarshalBinary() ([]byte, error) {
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
func (w *writes) String() string { return "" }

// again reports whether the command was not seen written exactly once.
func (w *writes) again() bool { return w.n.Load() != 1 }

// notRun forgets the writes of a call that Redis refused without running
// it, NOSCRIPT: the next write is its first that can run. Only then: a
// call refused for now (TRYAGAIN) or redirected may have been written
// before by go-redis itself (it follows redirects and retries those
// replies), and one of those writes may have run.
func notRun(k *call) {
	for _, a := range k.args {
		if w, ok := a.(*writes); ok {
			w.n.Store(0)
		}
	}
}

// counted returns k with a writes argument last, and that argument.
func counted(k call) (call, *writes) {
	w := &writes{}
	k.args = append(k.args[:len(k.args):len(k.args)], w)
	return k, w
}

// goneAt is what a release script answers when the last hold it releases
// was already gone from Redis: see writes.
const goneAt = 3

// lostOrResent turns a release script's goneAt into 2 (released) when the
// call was written again, and leaves it as the loss it is otherwise.
func lostOrResent(n int64, w *writes) int64 {
	if n == goneAt && w.again() {
		return 2
	}
	return n
}
