package holds

import "github.com/redisync-go/redisync/internal/transport"

// GoneAt is what a release script answers when the last hold it releases
// was already gone from Redis: see writes.
const GoneAt = 3

// LostOrResent turns a release script's GoneAt into 2 (released) when the
// call was written again, and leaves it as the loss it is otherwise.
func LostOrResent(n int64, w *transport.Writes) int64 {
	if n == GoneAt && w.Again() {
		return 2
	}
	return n
}
