package transport

import (
	"encoding"
	"fmt"
	"strconv"
)

// The RESP encoding of a call: an array of bulk strings, as Redis reads a
// command. A script goes as EVALSHA <digest> <numkeys> <keys...> <args...>,
// or whole (EVAL <source> ...) after NOSCRIPT or while its digest is not
// known (FIPS 140-only mode); a call without a script is its arguments.
// Arguments are the few types redisync's calls carry, encoded as go-redis
// encodes them, without reflection; the Publish placeholder is the publish
// command the Options say.

// appendCall appends k's command to b: as EVAL when eval, with pub in
// place of Publish. On an error (an argument of a type it cannot encode)
// b is returned as it was.
func appendCall(b []byte, k *Call, eval bool, pub string) ([]byte, error) {
	start := len(b)
	n := len(k.Args)
	if k.Script != nil {
		n += 3 + len(k.Keys)
	}
	b = appendArray(b, n)
	if k.Script != nil {
		if sha := k.Script.Hash(); eval || sha == "" {
			b = appendBulk(b, "eval")
			b = appendBulk(b, k.Script.Source())
		} else {
			b = appendBulk(b, "evalsha")
			b = appendBulk(b, sha)
		}
		b = appendInt(b, int64(len(k.Keys)))
		for _, key := range k.Keys {
			b = appendBulk(b, key)
		}
	}
	for _, a := range k.Args {
		var err error
		if b, err = appendArg(b, a, pub); err != nil {
			return b[:start], err
		}
	}
	return b, nil
}

// evalOf reports whether k goes whole (EVAL) when eval is asked or its
// script does not know its digest.
func evalOf(k *Call, eval bool) bool {
	return k.Script != nil && (eval || k.Script.Hash() == "")
}

// appendCommand appends the command of args (strings and integers).
func appendCommand(b []byte, args ...any) []byte {
	b = appendArray(b, len(args))
	for _, a := range args {
		b, _ = appendArg(b, a, "")
	}
	return b
}

// appendArg appends one argument as a bulk string.
func appendArg(b []byte, a any, pub string) ([]byte, error) {
	switch v := a.(type) {
	case string:
		return appendBulk(b, v), nil
	case []byte:
		return appendBulkBytes(b, v), nil
	case int:
		return appendInt(b, int64(v)), nil
	case int64:
		return appendInt(b, v), nil
	case int32:
		return appendInt(b, int64(v)), nil
	case int16:
		return appendInt(b, int64(v)), nil
	case int8:
		return appendInt(b, int64(v)), nil
	case uint:
		return appendUint(b, uint64(v)), nil
	case uint64:
		return appendUint(b, v), nil
	case uint32:
		return appendUint(b, uint64(v)), nil
	case uint16:
		return appendUint(b, uint64(v)), nil
	case uint8:
		return appendUint(b, uint64(v)), nil
	case float64:
		return appendBulk(b, strconv.FormatFloat(v, 'f', -1, 64)), nil
	case float32:
		return appendBulk(b, strconv.FormatFloat(float64(v), 'f', -1, 32)), nil
	case bool:
		if v {
			return appendInt(b, 1), nil
		}
		return appendInt(b, 0), nil
	case nil:
		return appendBulk(b, ""), nil
	case publishArg:
		return appendBulk(b, pub), nil
	case encoding.BinaryMarshaler:
		p, err := v.MarshalBinary()
		if err != nil {
			return b, err
		}
		return appendBulkBytes(b, p), nil
	}
	return b, fmt.Errorf("redisync: an argument of type %T cannot be sent", a)
}

func appendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

func appendBulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

func appendBulkBytes(b []byte, p []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(p)), 10)
	b = append(b, '\r', '\n')
	b = append(b, p...)
	return append(b, '\r', '\n')
}

// appendInt appends n's decimal digits as a bulk string, without the
// string.
func appendInt(b []byte, n int64) []byte {
	var d [20]byte
	return appendBulkBytes(b, strconv.AppendInt(d[:0], n, 10))
}

func appendUint(b []byte, n uint64) []byte {
	var d [20]byte
	return appendBulkBytes(b, strconv.AppendUint(d[:0], n, 10))
}

// cmdArgs returns k's command as go-redis's hooks see a command's Args:
// the name first, then what follows it, the Publish placeholder replaced.
func cmdArgs(k *Call, eval bool, pub string) []any {
	n := len(k.Args)
	if k.Script != nil {
		n += 3 + len(k.Keys)
	}
	args := make([]any, 0, n)
	if k.Script != nil {
		if evalOf(k, eval) {
			args = append(args, "eval", k.Script.Source())
		} else {
			args = append(args, "evalsha", k.Script.Hash())
		}
		args = append(args, len(k.Keys))
		for _, key := range k.Keys {
			args = append(args, key)
		}
	}
	for _, a := range k.Args {
		if _, ok := a.(publishArg); ok {
			a = pub
		}
		args = append(args, a)
	}
	return args
}

// encodeSize is what a queued call's bytes are allocated for: most of
// redisync's calls fit (a script's digest, its keys and arguments).
const encodeSize = 256
