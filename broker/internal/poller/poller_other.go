//go:build !linux

package poller

import (
	"errors"
	"log/slog"
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

func (*Poller) Watch(func()) uint64             { return 0 }
func (*Poller) Unwatch(uint64)                  {}
func (*Poller) Arm(uintptr, uint64, bool) error { return errors.ErrUnsupported }
func (*Poller) Close() error                    { return nil }
