package transport

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// RESP2 replies, as the engine reads them off its connections (it never
// says HELLO: its connections speak RESP2, whatever the user's client
// speaks). A reply is parsed from the bytes already read, so a read cut
// by a deadline (its caller's context) loses nothing: the bytes stay
// buffered and the next read goes on from there. Integers, statuses and
// errors cost no allocation but the few strings a reply carries (the
// usual statuses and NOSCRIPT's message are shared); a bulk string is one
// allocation; an array of integers (what most scripts answer) is one
// []int64; any other array is a []any of the values go-redis would give.

// Kinds of a parsed reply.
const (
	kindNil = iota // a null bulk string or array
	kindInt
	kindStr // a bulk string or a status
	kindErr
	kindInts // an array of integers only
	kindArr  // any other array
)

// value is one parsed reply.
type value struct {
	kind int
	n    int64
	s    string  // kindStr; kindErr: the message
	ints []int64 // kindInts
	arr  []any   // kindArr: int64, string, nil, []any or a RedisError
}

// RedisError is an error reply of Redis's (go-redis's redis.Error: the
// layers above tell Redis's refusals from the wire's faults with it).
type RedisError string

func (e RedisError) Error() string { return string(e) }

// RedisError marks it as Redis's own (go-redis's redis.Error).
func (RedisError) RedisError() {}

// Bounds of what a reply may claim, beyond which the stream is taken as
// corrupt: a line (status, error, length), a bulk string (Redis's own
// proto-max-bulk-len default), an array's length and nesting.
const (
	maxLine  = 1 << 20
	maxBulk  = 512 << 20
	maxArray = 1 << 24
	maxDepth = 16
)

// errProtocol is what a reply that is no RESP2 wraps.
var errProtocol = errors.New("redisync: protocol error in Redis's reply")

// errIncomplete says the buffered bytes end before the reply does.
var errIncomplete = errors.New("incomplete reply")

// Shared strings, so that the usual replies allocate nothing.
var (
	okStatus    = "OK"
	noScriptMsg = "NOSCRIPT No matching script. Please use EVAL."
)

// parse reads one reply at the start of b: the reply and how many bytes it
// took, errIncomplete when b ends first, or an error wrapping errProtocol.
func parse(b []byte) (value, int, error) {
	return parseDepth(b, 0)
}

func parseDepth(b []byte, depth int) (value, int, error) {
	if len(b) == 0 {
		return value{}, 0, errIncomplete
	}
	line, n, err := readLine(b)
	if err != nil {
		return value{}, 0, err
	}
	switch b[0] {
	case '+':
		return value{kind: kindStr, s: status(line[1:])}, n, nil
	case '-':
		return value{kind: kindErr, s: errorText(line[1:])}, n, nil
	case ':':
		i, err := parseInt(line[1:])
		if err != nil {
			return value{}, 0, err
		}
		return value{kind: kindInt, n: i}, n, nil
	case '$':
		l, err := parseInt(line[1:])
		switch {
		case err != nil:
			return value{}, 0, err
		case l == -1:
			return value{kind: kindNil}, n, nil
		case l < 0 || l > maxBulk:
			return value{}, 0, fmt.Errorf("%w: bulk length %d", errProtocol, l)
		}
		end := n + int(l)
		if len(b) < end+2 {
			return value{}, 0, errIncomplete
		}
		if b[end] != '\r' || b[end+1] != '\n' {
			return value{}, 0, fmt.Errorf("%w: a bulk string not ended by CRLF", errProtocol)
		}
		return value{kind: kindStr, s: string(b[n:end])}, end + 2, nil
	case '*':
		l, err := parseInt(line[1:])
		switch {
		case err != nil:
			return value{}, 0, err
		case l == -1:
			return value{kind: kindNil}, n, nil
		case l < 0 || l > maxArray:
			return value{}, 0, fmt.Errorf("%w: array length %d", errProtocol, l)
		case depth >= maxDepth:
			return value{}, 0, fmt.Errorf("%w: arrays nested deeper than %d", errProtocol, maxDepth)
		}
		return parseArray(b, n, int(l), depth)
	default:
		return value{}, 0, fmt.Errorf("%w: unexpected %q", errProtocol, b[0])
	}
}

// parseArray reads the l elements of an array that start at b[at:].
func parseArray(b []byte, at, l, depth int) (value, int, error) {
	// A first pass says whether every element is an integer, and whether
	// they are all there, without allocating.
	ints, end := true, at
	for range l {
		if end >= len(b) {
			return value{}, 0, errIncomplete
		}
		if b[end] != ':' {
			ints = false
			break
		}
		_, n, err := readLine(b[end:])
		if err != nil {
			return value{}, 0, err
		}
		end += n
	}
	if ints {
		out := make([]int64, l)
		p := at
		for i := range out {
			line, n, _ := readLine(b[p:])
			v, err := parseInt(line[1:])
			if err != nil {
				return value{}, 0, err
			}
			out[i] = v
			p += n
		}
		return value{kind: kindInts, ints: out}, p, nil
	}
	// Check the whole array is there before allocating for it.
	p := at
	for range l {
		_, n, err := parseDepth(b[p:], depth+1)
		if err != nil {
			return value{}, 0, err
		}
		p += n
	}
	out := make([]any, l)
	p = at
	for i := range out {
		v, n, _ := parseDepth(b[p:], depth+1)
		out[i] = v.any()
		p += n
	}
	return value{kind: kindArr, arr: out}, p, nil
}

// any returns v as go-redis gives an element of an array.
func (v value) any() any {
	switch v.kind {
	case kindInt:
		return v.n
	case kindStr:
		return v.s
	case kindErr:
		return RedisError(v.s)
	case kindInts:
		out := make([]any, len(v.ints))
		for i, n := range v.ints {
			out[i] = n
		}
		return out
	case kindArr:
		return v.arr
	}
	return nil
}

// readLine returns the line at the start of b, without its CRLF, and the
// bytes it takes with it.
func readLine(b []byte) ([]byte, int, error) {
	for i := 1; i < len(b); i++ {
		if b[i] == '\n' {
			if b[i-1] != '\r' {
				return nil, 0, fmt.Errorf("%w: a line ended without CR", errProtocol)
			}
			return b[:i-1], i + 1, nil
		}
		if i >= maxLine {
			return nil, 0, fmt.Errorf("%w: a line longer than %d bytes", errProtocol, maxLine)
		}
	}
	return nil, 0, errIncomplete
}

// parseInt reads a RESP integer, refusing what overflows an int64.
func parseInt(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: an empty integer", errProtocol)
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, fmt.Errorf("%w: an empty integer", errProtocol)
		}
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q in an integer", errProtocol, c)
		}
		if n > (1<<63)/10 {
			return 0, fmt.Errorf("%w: an integer overflows int64", errProtocol)
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case neg && n > 1<<63:
		return 0, fmt.Errorf("%w: an integer overflows int64", errProtocol)
	case neg:
		return -int64(n), nil
	case n > 1<<63-1:
		return 0, fmt.Errorf("%w: an integer overflows int64", errProtocol)
	}
	return int64(n), nil
}

func status(b []byte) string {
	if string(b) == okStatus {
		return okStatus
	}
	return string(b)
}

func errorText(b []byte) string {
	if string(b) == noScriptMsg {
		return noScriptMsg
	}
	return string(b)
}

// reader reads replies off a connection into its buffer (see the top of
// the file). Only the goroutine that has a connection's reading role uses
// it.
type reader struct {
	rd   io.Reader
	buf  []byte // buf[r:w] is read, not parsed yet
	r, w int
}

const readerSize = 16 << 10

func newReader(rd io.Reader) *reader { return &reader{rd: rd, buf: make([]byte, readerSize)} }

// next returns the next reply, reading as much as it needs; an error of
// the connection's (a deadline passed, say) loses none of the bytes read,
// and the next call goes on from them. A protocol error is final.
func (rr *reader) next() (value, error) {
	for {
		if rr.r < rr.w {
			v, n, err := parse(rr.buf[rr.r:rr.w])
			if err == nil {
				rr.r += n
				if rr.r == rr.w {
					rr.r, rr.w = 0, 0
				}
				return v, nil
			}
			if err != errIncomplete {
				return value{}, err
			}
		}
		if err := rr.fill(); err != nil {
			return value{}, err
		}
	}
}

// tryNext returns the next reply if it is read whole already, without
// reading more (ok false otherwise).
func (rr *reader) tryNext() (v value, ok bool, err error) {
	if rr.r == rr.w {
		return value{}, false, nil
	}
	v, n, err := parse(rr.buf[rr.r:rr.w])
	switch {
	case err == errIncomplete:
		return value{}, false, nil
	case err != nil:
		return value{}, false, err
	}
	rr.r += n
	if rr.r == rr.w {
		rr.r, rr.w = 0, 0
	}
	return v, true, nil
}

// buffered reports whether bytes are read and not parsed yet.
func (rr *reader) buffered() bool { return rr.r < rr.w }

// fill reads more bytes, making room first.
func (rr *reader) fill() error {
	if rr.r > 0 && rr.w == len(rr.buf) {
		rr.w = copy(rr.buf, rr.buf[rr.r:rr.w])
		rr.r = 0
	}
	if rr.w == len(rr.buf) {
		if len(rr.buf) >= maxBulk+maxLine {
			return fmt.Errorf("%w: a reply longer than %d bytes", errProtocol, len(rr.buf))
		}
		nb := make([]byte, 2*len(rr.buf))
		rr.w = copy(nb, rr.buf[rr.r:rr.w])
		rr.r = 0
		rr.buf = nb
	}
	n, err := rr.rd.Read(rr.buf[rr.w:])
	rr.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// The conversions of a reply, as go-redis's Cmd makes them (a null reply
// is the Reply's error, redis.Nil, before any of them).

func (v value) int64() (int64, error) {
	switch v.kind {
	case kindInt:
		return v.n, nil
	case kindStr:
		return strconv.ParseInt(v.s, 10, 64)
	}
	return 0, v.unexpected("Int64")
}

func (v value) text() (string, error) {
	if v.kind == kindStr {
		return v.s, nil
	}
	return "", v.unexpected("String")
}

func (v value) int64Slice() ([]int64, error) {
	switch v.kind {
	case kindInts:
		return v.ints, nil
	case kindArr:
		out := make([]int64, len(v.arr))
		for i, e := range v.arr {
			switch e := e.(type) {
			case int64:
				out[i] = e
			case string:
				n, err := strconv.ParseInt(e, 10, 64)
				if err != nil {
					return nil, err
				}
				out[i] = n
			default:
				return nil, fmt.Errorf("redis: unexpected type=%T for Int64", e)
			}
		}
		return out, nil
	}
	return nil, v.unexpected("Int64Slice")
}

func (v value) slice() ([]any, error) {
	switch v.kind {
	case kindArr:
		return v.arr, nil
	case kindInts:
		return v.any().([]any), nil
	}
	return nil, v.unexpected("Slice")
}

// unexpected is go-redis's error for a reply of another type than asked.
func (v value) unexpected(want string) error {
	return fmt.Errorf("redis: unexpected type=%T for %s", v.any(), want)
}
