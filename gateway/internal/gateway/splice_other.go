//go:build !linux

package gateway

import "net"

// Elsewhere a TCP relay is TCPConn.ReadFrom, and the pool has no pipes.
type pipe struct{}

const maxPooledPipes = 0

func spliceCopy(dst, src *net.TCPConn, _ *bufPool) (int64, error) { return dst.ReadFrom(src) }
