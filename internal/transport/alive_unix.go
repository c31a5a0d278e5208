//go:build unix

package transport

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// errUnasked is a connection that has bytes to read while no call is in
// flight on it: out of step, not to be written to.
var errUnasked = errors.New("redisync: bytes from Redis that no call asked for")

// peerClosed reports why nc, idle, must not be written to: the peer closed
// it (a restarted Redis, a proxy that cut it), it failed, or it has bytes
// nobody asked for; nil when it looks alive or cannot be looked at (a
// connection without a file descriptor, or one whose transport is buffered
// above it: TLS). One non-blocking peek, nothing consumed.
func peerClosed(nc net.Conn) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var why error
	if err := raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			why = errUnasked
		case n == 0 && err == nil:
			why = io.EOF
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		default:
			why = err
		}
		return true // never wait
	}); err != nil {
		return err
	}
	return why
}
