package shard

import (
	"crypto/tls"
	"net"
	"syscall"
)

// vectorConn returns the connection to write vectors to with writev: nc
// itself when it is a TCP or Unix connection, or the connection a wrapper
// exposes with NetConn() (as crypto/tls does) when that is one. A wrapper
// must only expose a connection its writes go to unchanged (a PROXY
// protocol wrapper, not TLS). nil means no writev.
func vectorConn(nc net.Conn) net.Conn {
	for range 4 {
		switch nc.(type) {
		case *net.TCPConn, *net.UnixConn:
			return nc
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		if _, isTLS := nc.(interface{ ConnectionState() tls.ConnectionState }); isTLS {
			return nil // TLS encrypts: its writes are not the bytes below
		}
		nc = u.NetConn()
	}
	return nil
}

// rawConn is the socket under vectorConn(nc), for inline writes and idle
// waits; nil when there is none.
func rawConn(nc net.Conn) *rawIO {
	sc, ok := vectorConn(nc).(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return newRawIO(rc)
}
