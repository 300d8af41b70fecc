//go:build !linux

package shard

// Without the poller (Linux only) no connection parks, so none detaches.

func (c *conn) detachLocked() bool { return false }

func (c *conn) attachLocked() {}
