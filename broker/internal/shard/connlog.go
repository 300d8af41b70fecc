package shard

import (
	"context"
	"log/slog"
)

// logger returns the connection's logger, made on first use: most
// connections never log, and a logger's preformatted attributes cost
// about 400 bytes a connection.
func (c *conn) logger() *slog.Logger {
	if l := c.log.Load(); l != nil {
		return l
	}
	l := c.shard.opts.Logger.With("tenant_id", c.info.TenantID, "conn_id", c.id,
		"remote_addr", c.info.RemoteAddr)
	if c.clientID == "" {
		return l // still in CONNECT: keep none without the client id
	}
	l = l.With("client_id", c.clientID)
	if !c.log.CompareAndSwap(nil, l) {
		return c.log.Load()
	}
	return l
}

// debug logs at debug level, making the connection's logger only if that
// level is on.
func (c *conn) debug(msg string, args ...any) {
	if c.shard.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		c.logger().Debug(msg, args...)
	}
}
