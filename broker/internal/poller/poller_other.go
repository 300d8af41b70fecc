//go:build !linux

package poller

import (
	"errors"
	"log/slog"
	"time"
)

// Poller is Linux only: elsewhere New fails and connections keep their
// goroutine while idle.
type Poller struct{}

// Supported reports whether this system has a poller (Linux).
const Supported = false

// ErrClosed is returned by Arm after Close.
var ErrClosed = errors.New("poller: closed")

// New fails: there is no poller on this system.
func New(*slog.Logger) (*Poller, error) { return nil, errors.ErrUnsupported }

// Waker is what a key wakes (see the Linux poller).
type Waker = interface { // an alias: users name the same interface without importing this package
	Wake()
	Due()
}

func (*Poller) Watch(Waker) uint64              { return 0 }
func (*Poller) Unwatch(uint64)                  {}
func (*Poller) After(uint64, time.Time)         {}
func (*Poller) Arm(uintptr, uint64, bool) error { return errors.ErrUnsupported }
func (*Poller) Disarm(uintptr) error            { return errors.ErrUnsupported }
func (*Poller) Close() error                    { return nil }
