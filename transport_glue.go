package redisync

import (
	"github.com/redisync-go/redisync/internal/transport"
	"github.com/redisync-go/redisync/lua"
)

// The transport (internal/transport) carries every script a Client sends;
// these names are its calls and replies as the layers above use them.
type (
	call  = transport.Call
	reply = transport.Reply
)

// publish is the publish command's place in a call's arguments (see
// transport.Publish).
var publish = transport.Publish

// script returns the call of s with keys and args.
func script(s *lua.Script, keys []string, args ...any) call {
	return transport.Script(s, keys, args...)
}
