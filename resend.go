package redisync

import "github.com/redisync-go/redisync/internal/transport"

// goneAt is what a release script answers when the last hold it releases
// was already gone from Redis: see writes.
const goneAt = 3

// lostOrResent turns a release script's goneAt into 2 (released) when the
// call was written again, and leaves it as the loss it is otherwise.
func lostOrResent(n int64, w *transport.Writes) int64 {
	if n == goneAt && w.Again() {
		return 2
	}
	return n
}
