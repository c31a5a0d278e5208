package transport

import (
	"testing"

	"github.com/redisync-go/redisync/internal/redistest"
)

// watchLag measures the machine's scheduling delay while a timed section
// runs (redistest.Lag); a bound adds its Slack.
func watchLag(t testing.TB) *redistest.Lag { return redistest.WatchLag(t) }
