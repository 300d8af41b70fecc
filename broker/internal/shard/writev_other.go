//go:build !linux

package shard

import (
	"errors"
	"syscall"
)

// tryWritev is Linux only; elsewhere every batch goes to the writer.
func tryWritev(rc syscall.RawConn, vec [][]byte, iov []syscall.Iovec) (int, []syscall.Iovec, error) {
	return 0, iov, errors.ErrUnsupported
}
