package holds

import "github.com/redisync-go/redisync/internal/transport"

// The transport's calls and replies, as this package uses them.
type (
	call  = transport.Call
	reply = transport.Reply
)
