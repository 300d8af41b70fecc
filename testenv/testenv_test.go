package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func TestPostgresDatabasesAreFreshAndMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := Postgres(t), Postgres(t)

	// Both databases carry the whole schema...
	for _, pool := range []interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}{a, b} {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('accounts','tenants','credentials','quotas','nodes','usage')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 6 {
			t.Fatalf("core tables present = %d, want 6", n)
		}
	}
	// ...and share nothing.
	if _, err := a.Exec(ctx, "INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("second database sees %d accounts from the first", n)
	}
}

func TestRedisSpacesAreSeparateAndCleaned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var leftover string
	t.Run("write", func(t *testing.T) {
		s := Redis(t)
		leftover = s.Prefix + "k"
		if err := s.Client.Set(ctx, leftover, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		other := Redis(t)
		if other.Prefix == s.Prefix {
			t.Fatalf("two spaces share prefix %q", s.Prefix)
		}
	})
	s := Redis(t)
	if n, err := s.Client.Exists(ctx, leftover).Result(); err != nil || n != 0 {
		t.Fatalf("key %q left behind after its test ended (exists=%d, err=%v)", leftover, n, err)
	}
}

// A private Postgres and a private Redis stop and start again on the same
// port, with the Postgres data kept: what the e2e fault tests rely on.
func TestPrivateServersStopAndStartOnTheirPorts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := NewPostgresServer(t)
	rs := NewRedisServer(t)

	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')"); err != nil {
		t.Fatal(err)
	}
	pg.Stop(t)
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a connection to the stopped Postgres still answers")
	}
	pg.StartLocal(t) // the socket only: TCP clients still find it down
	if c, err := pgx.Connect(ctx, pg.URL); err == nil {
		c.Close(ctx)
		t.Fatal("Postgres started on its socket only accepts TCP connections")
	}
	local, err := pgx.Connect(ctx, pg.SocketURL())
	if err != nil {
		t.Fatalf("over the socket: %v", err)
	}
	local.Close(ctx)
	pg.Stop(t)
	pg.Start(t)
	conn2, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	defer conn2.Close(ctx)
	var n int
	if err := conn2.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after restart: %d accounts, %v; want the 1 written before", n, err)
	}

	opt, err := redis.ParseURL(rs.URL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rs.Stop(t)
	if err := rc.Ping(ctx).Err(); err == nil {
		t.Fatal("the stopped Redis still answers")
	}
	rs.Start(t)
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}
