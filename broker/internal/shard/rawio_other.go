//go:build !linux

package shard

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// rawIO is Linux only: elsewhere every batch goes to the writer and idle
// connections keep their buffers (newRawIO returns nil).
type rawIO struct {
	rc       syscall.RawConn // never set: no connection parks (detach.go)
	fd       int32
	input    inputKind
	inputErr syscall.Errno
	waits    func()
}

func newRawIO(syscall.RawConn) *rawIO { return nil }

func (*rawIO) tryWritev([][]byte) (int, error) { return 0, errors.ErrUnsupported }

func (*rawIO) waitReadable() error { return errors.ErrUnsupported }

func (*rawIO) hasCallbacks() bool { return false }

func (*rawIO) reader(nc net.Conn) io.Reader { return nc }

func (*rawIO) waitInto([]byte) error { return errors.ErrUnsupported }

func (*rawIO) dropRead() {}

// What a new connection's socket holds before its handshake: never asked
// elsewhere, where no connection parks.
const (
	connectNone uint8 = iota
	connectWhole
	connectPartial
)

func (*rawIO) connectInput() uint8 { return connectWhole }

func (c *conn) shutSocket() { _ = c.nc.Close() }
