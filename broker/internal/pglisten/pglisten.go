// Package pglisten follows Postgres NOTIFY channels on a dedicated
// connection, reconnecting after a second when it drops. The handlers
// are pgxlisten's: one that also implements pgxlisten.BacklogHandler is
// called after every (re)connect, once LISTEN is in place, to re-read
// what notifications may have been missed while away.
package pglisten

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
)

// Config says where to listen and how the listener's session is named
// (application_name in pg_stat_activity).
type Config struct {
	ConnString string
	AppName    string
	Log        *slog.Logger
}

// Run listens on every channel of handlers until ctx ends; it returns nil
// then, or the error that stopped it (a connection string that does not
// parse).
func Run(ctx context.Context, c Config, handlers map[string]pgxlisten.Handler) error {
	cfg, err := pgx.ParseConfig(c.ConnString)
	if err != nil {
		return err
	}
	if c.AppName != "" {
		cfg.RuntimeParams["application_name"] = c.AppName
	}
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) },
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() != nil { // shutting down: the end of the wait is expected
				return
			}
			c.Log.Warn("notification listener", "listener", c.AppName, "err", err)
		},
		ReconnectDelay: time.Second,
	}
	for ch, h := range handlers {
		l.Handle(ch, h)
	}
	err = l.Listen(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Rereader is the handler of a channel whose payload names a key (a
// tenant id) to read again: Reload on each notification, and on every
// (re)connect Reload for every key in Held, since notifications may have
// been missed while away.
type Rereader struct {
	Held   func() []string
	Reload func(ctx context.Context, conn *pgx.Conn, key string) error
}

// HandleNotification implements pgxlisten.Handler.
func (r Rereader) HandleNotification(ctx context.Context, n *pgconn.Notification, conn *pgx.Conn) error {
	return r.Reload(ctx, conn, n.Payload)
}

// HandleBacklog implements pgxlisten.BacklogHandler.
func (r Rereader) HandleBacklog(ctx context.Context, _ string, conn *pgx.Conn) error {
	for _, key := range r.Held() {
		if err := r.Reload(ctx, conn, key); err != nil {
			return err
		}
	}
	return nil
}
