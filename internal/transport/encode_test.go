package transport

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/lua"
)

func itoa(n int) string { return strconv.Itoa(n) }

func TestEncodeCall(t *testing.T) {
	k := Call{Script: lua.Lock, Keys: []string{"k"}, Args: []any{30000, "o:1", int64(-2), Publish, []byte("b"), true, uint8(7)}}
	b, err := appendCall(nil, &k, false, "spublish")
	require.NoError(t, err)
	sha := lua.Lock.Hash()
	want := "*11\r\n$7\r\nevalsha\r\n$40\r\n" + sha + "\r\n$1\r\n1\r\n$1\r\nk\r\n$5\r\n30000\r\n$3\r\no:1\r\n$2\r\n-2\r\n$8\r\nspublish\r\n$1\r\nb\r\n$1\r\n1\r\n$1\r\n7\r\n"
	assert.Equal(t, want, string(b))

	b, err = appendCall([]byte("x"), &k, true, "publish")
	require.NoError(t, err)
	assert.Contains(t, string(b), "$4\r\neval\r\n$"+itoa(len(lua.Lock.Source()))+"\r\n"+lua.Lock.Source()+"\r\n")
	assert.Equal(t, byte('x'), b[0])

	plain := Call{Keys: []string{"k"}, Args: []any{"get", "k"}}
	b, err = appendCall(nil, &plain, false, "")
	require.NoError(t, err)
	assert.Equal(t, "*2\r\n$3\r\nget\r\n$1\r\nk\r\n", string(b))
}

// An argument the engine cannot encode leaves the buffer as it was, and
// says why.
func TestEncodeRefusesUnknownTypes(t *testing.T) {
	k := Call{Keys: []string{"k"}, Args: []any{"set", "k", time.Second}}
	b, err := appendCall([]byte("before"), &k, false, "")
	require.ErrorContains(t, err, "time.Duration")
	assert.Equal(t, "before", string(b))
}

func TestEncodeAllocations(t *testing.T) {
	k := Call{Script: lua.Lock, Keys: []string{"k"}, Args: []any{30000, "o:1", 0}}
	buf := make([]byte, 0, 512)
	n := testing.AllocsPerRun(100, func() { _, _ = appendCall(buf[:0], &k, false, "publish") })
	assert.Zero(t, n)
}

func TestCmdArgs(t *testing.T) {
	k := Call{Script: lua.Lock, Keys: []string{"k"}, Args: []any{30000, Publish}}
	assert.Equal(t, []any{"evalsha", lua.Lock.Hash(), 1, "k", 30000, "publish"}, cmdArgs(&k, false, "publish"))
	assert.Equal(t, []any{"eval", lua.Lock.Source(), 1, "k", 30000, "publish"}, cmdArgs(&k, true, "publish"))
}
