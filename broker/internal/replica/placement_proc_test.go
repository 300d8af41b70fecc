package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/broker/internal/placement"
	"berth.dev/testenv"
)

// placementDB is the node processes' Postgres: nodes node_1..3 and tenants
// ten_1..ten_<groups>, one per group.
type placementDB struct {
	url   string
	store *placement.Store
}

func newPlacementDB(t *testing.T, groups int) placementDB {
	t.Helper()
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')`,
		`INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES ('node_1', '127.0.0.1:1', '127.0.0.1:1', 10),
			('node_2', '127.0.0.1:2', '127.0.0.1:2', 10), ('node_3', '127.0.0.1:3', '127.0.0.1:3', 10)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for g := 1; g <= groups; g++ {
		if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, account_id, slug, plan) VALUES ($1, 'acc_1', $2, 'free')`,
			fmt.Sprintf("ten_%d", g), fmt.Sprintf("t%d", g)); err != nil {
			t.Fatal(err)
		}
	}
	return placementDB{url: url, store: placement.NewStore(pool)}
}

// epoch is group g's recorded epoch (0: none yet).
func (p placementDB) epoch(g int) uint64 {
	pl, _ := p.store.Get(context.Background(), fmt.Sprintf("ten_%d", g))
	return pl.Epoch
}

// waitMoved waits until group g's placement names a leader other than the
// killed node at an epoch above before, and logs how long after the kill.
func (p placementDB) waitMoved(t *testing.T, g int, killed, before uint64, at time.Time) {
	t.Helper()
	tenant, old := fmt.Sprintf("ten_%d", g), fmt.Sprintf("node_%d", killed)
	var pl placement.Placement
	waitFor(t, 30*time.Second, tenant+": placement moved off the killed leader to a higher epoch", func() bool {
		var err error
		pl, err = p.store.Get(context.Background(), tenant)
		return err == nil && pl.Leader != old && pl.Epoch > before
	})
	t.Logf("group %d: placement %s epoch %d seen %v after the kill", g, pl.Leader, pl.Epoch, time.Since(at).Round(time.Millisecond))
}
