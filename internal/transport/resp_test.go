package transport

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseReplies(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want value
	}{
		{"+OK\r\n", value{kind: kindStr, s: "OK"}},
		{"-NOSCRIPT No matching script. Please use EVAL.\r\n", value{kind: kindErr, s: noScriptMsg}},
		{":-42\r\n", value{kind: kindInt, n: -42}},
		{":9223372036854775807\r\n", value{kind: kindInt, n: 1<<63 - 1}},
		{":-9223372036854775808\r\n", value{kind: kindInt, n: -1 << 63}},
		{"$5\r\nhello\r\n", value{kind: kindStr, s: "hello"}},
		{"$0\r\n\r\n", value{kind: kindStr, s: ""}},
		{"$-1\r\n", value{kind: kindNil}},
		{"*-1\r\n", value{kind: kindNil}},
		{"*2\r\n:1\r\n:0\r\n", value{kind: kindInts, ints: []int64{1, 0}}},
		{"*0\r\n", value{kind: kindInts, ints: []int64{}}},
		{"*3\r\n:1\r\n$1\r\na\r\n$-1\r\n", value{kind: kindArr, arr: []any{int64(1), "a", nil}}},
		{"*2\r\n*1\r\n:7\r\n-ERR x\r\n", value{kind: kindArr, arr: []any{[]any{int64(7)}, RedisError("ERR x")}}},
	} {
		v, n, err := parse([]byte(tc.in + "+next\r\n"))
		require.NoError(t, err, tc.in)
		assert.Equal(t, len(tc.in), n, tc.in)
		assert.Equal(t, tc.want, v, tc.in)
		// Every prefix is incomplete, never an error or a reply.
		for i := range len(tc.in) {
			_, _, err := parse([]byte(tc.in[:i]))
			assert.ErrorIs(t, err, errIncomplete, "%q", tc.in[:i])
		}
	}
}

func TestParseRefusesCorruptReplies(t *testing.T) {
	for _, in := range []string{
		":99999999999999999999\r\n",  // overflows
		":-9223372036854775809\r\n",  // overflows
		":12a\r\n",                   // not a number
		":\r\n",                      // empty
		"$-2\r\n",                    // bad length
		"$3\r\nabcd\r\n",             // longer than it says
		"$999999999999\r\n",          // too long
		"*-5\r\n",                    // bad length
		"*99999999999\r\n",           // too long
		"+OK\n",                      // no CR
		"?what\r\n",                  // no such type
		strings.Repeat("*1\r\n", 20), // nested too deep
	} {
		_, _, err := parse([]byte(in + ":1\r\n"))
		assert.ErrorIs(t, err, errProtocol, "%q", in)
	}
	_, _, err := parse([]byte("+" + strings.Repeat("x", maxLine+1)))
	assert.ErrorIs(t, err, errProtocol, "a line without end")
}

// A reader cut by a timeout goes on where it was: no byte is lost.
func TestReaderResumesAfterAnError(t *testing.T) {
	stream := "*2\r\n:1\r\n:1\r\n$5\r\nhello\r\n:3\r\n"
	r := newReader(iotest.TimeoutReader(iotest.OneByteReader(strings.NewReader(stream))))
	var got []value
	errs := 0
	for len(got) < 3 {
		v, err := r.next()
		if err != nil {
			require.ErrorIs(t, err, iotest.ErrTimeout)
			errs++
			continue
		}
		got = append(got, v)
	}
	assert.Positive(t, errs)
	assert.Equal(t, []int64{1, 1}, got[0].ints)
	assert.Equal(t, "hello", got[1].s)
	assert.EqualValues(t, 3, got[2].n)
	_, err := r.next()
	assert.ErrorIs(t, err, io.EOF)
}

// A reply larger than the buffer grows it.
func TestReaderGrows(t *testing.T) {
	big := strings.Repeat("x", 3*readerSize)
	r := newReader(strings.NewReader("$" + itoa(len(big)) + "\r\n" + big + "\r\n:1\r\n"))
	v, err := r.next()
	require.NoError(t, err)
	assert.Equal(t, big, v.s)
	v, err = r.next()
	require.NoError(t, err)
	assert.EqualValues(t, 1, v.n)
}

// The usual replies parse without allocating: integers, statuses, errors,
// and NOSCRIPT's message.
func TestParseAllocations(t *testing.T) {
	for _, in := range []string{":1\r\n", "+OK\r\n", "-" + noScriptMsg + "\r\n"} {
		b := []byte(in)
		n := testing.AllocsPerRun(100, func() { _, _, _ = parse(b) })
		assert.Zero(t, n, in)
	}
	b := []byte("*2\r\n:1\r\n:1\r\n")
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() { _, _, _ = parse(b) }), 1.0, "an array of integers: one []int64")
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "*2\r\n:1\r\n$-1\r\n", "*1\r\n*1\r\n-E\r\n", "$-1\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, n, err := parse(b)
		switch {
		case err == nil:
			if n <= 0 || n > len(b) {
				t.Fatalf("took %d of %d bytes", n, len(b))
			}
			// What parsed parses the same from a reader, one byte a
			// read.
			r := newReader(iotest.OneByteReader(bytes.NewReader(b[:n])))
			v2, err := r.next()
			if err != nil {
				t.Fatalf("the reader failed on what parsed: %v", err)
			}
			assert.Equal(t, v, v2)
		case errors.Is(err, errIncomplete), errors.Is(err, errProtocol):
		default:
			t.Fatalf("an error that is neither incomplete nor protocol: %v", err)
		}
	})
}
