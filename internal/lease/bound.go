package lease

import "time"

// Bound turns a PTTL reply into the longest wait before the next try: the
// remaining lease, a millisecond when the key is gone, and fallback when the
// key has no expiry (it was not written by redisync or Redisson).
func Bound(pttl int64, fallback time.Duration) time.Duration {
	switch {
	case pttl == -1:
		return fallback
	case pttl <= 0:
		return time.Millisecond
	default:
		return time.Duration(pttl) * time.Millisecond
	}
}
