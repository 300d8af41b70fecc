package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// seed makes three nodes and tenants ten_a, ten_b.
func seed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	exec(t, pool, `INSERT INTO accounts (id, email, password_hash) VALUES ('acc_1', 'a@example.com', 'x')`)
	exec(t, pool, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES
		('node_1', '127.0.0.1:1', '127.0.0.1:1', 10), ('node_2', '127.0.0.1:2', '127.0.0.1:2', 10),
		('node_3', '127.0.0.1:3', '127.0.0.1:3', 10)`)
	exec(t, pool, `INSERT INTO tenants (id, account_id, slug, plan, node_id) VALUES
		('ten_a', 'acc_1', 'a', 'free', 'node_1'), ('ten_b', 'acc_1', 'b', 'free', 'node_1')`)
}

var all3 = []string{"node_1", "node_2", "node_3"}

func TestRecordOnlyForward(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool)
	s := NewStore(pool)
	ctx := context.Background()
	if _, err := s.Get(ctx, "ten_a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before any record: %v, want ErrNotFound", err)
	}
	steps := []struct {
		name    string
		p       Placement
		wantErr error
		want    Placement // what Get returns after the step
	}{
		{"first record", Placement{Leader: "node_1", Replicas: all3, Epoch: 5}, nil, Placement{Leader: "node_1", Replicas: all3, Epoch: 5}},
		{"lower epoch refused", Placement{Leader: "node_2", Replicas: all3, Epoch: 4}, ErrStale, Placement{Leader: "node_1", Replicas: all3, Epoch: 5}},
		{"same epoch, another leader refused", Placement{Leader: "node_2", Replicas: all3, Epoch: 5}, ErrStale, Placement{Leader: "node_1", Replicas: all3, Epoch: 5}},
		{"same record again is a no-op", Placement{Leader: "node_1", Replicas: all3, Epoch: 5}, nil, Placement{Leader: "node_1", Replicas: all3, Epoch: 5}},
		{"same epoch and leader, new configuration", Placement{Leader: "node_1", Replicas: []string{"node_1", "node_3"}, Epoch: 5, ConfigIndex: 40}, nil, Placement{Leader: "node_1", Replicas: []string{"node_1", "node_3"}, Epoch: 5, ConfigIndex: 40}},
		{"same epoch and leader, an older configuration refused", Placement{Leader: "node_1", Replicas: all3, Epoch: 5, ConfigIndex: 39}, ErrStale, Placement{Leader: "node_1", Replicas: []string{"node_1", "node_3"}, Epoch: 5, ConfigIndex: 40}},
		{"same epoch and leader, the same configuration index with other replicas refused", Placement{Leader: "node_1", Replicas: all3, Epoch: 5, ConfigIndex: 40}, ErrStale, Placement{Leader: "node_1", Replicas: []string{"node_1", "node_3"}, Epoch: 5, ConfigIndex: 40}},
		{"higher epoch moves the leader, whatever its config index", Placement{Leader: "node_3", Replicas: all3, Epoch: 9, ConfigIndex: 12}, nil, Placement{Leader: "node_3", Replicas: all3, Epoch: 9, ConfigIndex: 12}},
		{"epoch 0 refused", Placement{Leader: "node_3", Replicas: all3, Epoch: 0}, nil, Placement{Leader: "node_3", Replicas: all3, Epoch: 9, ConfigIndex: 12}},
	}
	for _, st := range steps {
		st.p.TenantID = "ten_a"
		err := s.Record(ctx, st.p)
		switch {
		case st.p.Epoch == 0:
			if err == nil {
				t.Fatalf("%s: Record succeeded", st.name)
			}
		case !errors.Is(err, st.wantErr):
			t.Fatalf("%s: Record = %v, want %v", st.name, err, st.wantErr)
		}
		got, err := s.Get(ctx, "ten_a")
		if err != nil {
			t.Fatal(err)
		}
		if got.Leader != st.want.Leader || got.Epoch != st.want.Epoch || got.ConfigIndex != st.want.ConfigIndex || !slices.Equal(got.Replicas, st.want.Replicas) {
			t.Fatalf("%s: stored %+v, want %+v", st.name, got, st.want)
		}
	}
	if _, err := s.Get(ctx, "ten_b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ten_b: %v, want ErrNotFound", err)
	}
}

// Writers race with interleaved epochs: the row ends at the highest, and a
// reader polling all along never sees it go back.
func TestRacingWritersEndWithHighestEpoch(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool)
	s := NewStore(pool)
	ctx := context.Background()
	const writers, perWriter = 4, 60
	stop := make(chan struct{})
	var readerErr error
	var rwg sync.WaitGroup
	rwg.Go(func() {
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			p, err := s.Get(ctx, "ten_a")
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				readerErr = err
				return
			}
			if p.Epoch < last {
				readerErr = fmt.Errorf("epoch went back from %d to %d", last, p.Epoch)
				return
			}
			last = p.Epoch
		}
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	stale := 0
	for w := range writers {
		wg.Go(func() {
			// Writer w writes epochs w+1, w+1+writers, ... in an order that
			// descends halfway, so late low epochs arrive after high ones.
			var epochs []uint64
			for i := range perWriter {
				epochs = append(epochs, uint64(w+1+i*writers))
			}
			slices.Reverse(epochs[perWriter/2:])
			leader := all3[w%3]
			for _, e := range epochs {
				err := s.Record(ctx, Placement{TenantID: "ten_a", Leader: leader, Replicas: all3, Epoch: e})
				switch {
				case errors.Is(err, ErrStale):
					mu.Lock()
					stale++
					mu.Unlock()
				case err != nil:
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	if readerErr != nil {
		t.Fatal(readerErr)
	}
	p, err := s.Get(ctx, "ten_a")
	if err != nil {
		t.Fatal(err)
	}
	const highest = writers * perWriter
	if p.Epoch != highest || p.Leader != all3[(highest-1)%writers%3] {
		t.Fatalf("final %+v, want epoch %d led by %s", p, highest, all3[(highest-1)%writers%3])
	}
	if stale == 0 {
		t.Fatal("no write was refused as stale: the race was not exercised")
	}
	t.Logf("%d writes, %d refused as stale", writers*perWriter, stale)
}

// listen opens a connection listening on Channel.
func listen(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if _, err := c.Exec(ctx, "LISTEN "+Channel); err != nil {
		t.Fatal(err)
	}
	return c
}

func nextNotification(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := c.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("no notification within 5 s: %v", err)
	}
	if n.Channel != Channel {
		t.Fatalf("notification on %q", n.Channel)
	}
	return n.Payload
}

// A recorded change NOTIFYs berth_placement with the tenant id; a refused
// or no-op write sends nothing.
func TestRecordNotifies(t *testing.T) {
	url := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	seed(t, pool)
	c := listen(t, url)
	s := NewStore(pool)
	ctx := context.Background()

	if err := s.Record(ctx, Placement{TenantID: "ten_b", Leader: "node_2", Replicas: all3, Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	if got := nextNotification(t, c); got != "ten_b" {
		t.Fatalf("payload %q, want ten_b", got)
	}
	if err := s.Record(ctx, Placement{TenantID: "ten_b", Leader: "node_1", Replicas: all3, Epoch: 2}); !errors.Is(err, ErrStale) {
		t.Fatal(err)
	}
	if err := s.Record(ctx, Placement{TenantID: "ten_b", Leader: "node_2", Replicas: all3, Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `SELECT pg_notify('berth_placement', 'marker')`)
	if got := nextNotification(t, c); got != "marker" {
		t.Fatalf("a refused or no-op write notified %q", got)
	}
	if err := s.Record(ctx, Placement{TenantID: "ten_b", Leader: "node_3", Replicas: all3, Epoch: 4}); err != nil {
		t.Fatal(err)
	}
	if got := nextNotification(t, c); got != "ten_b" {
		t.Fatalf("payload %q, want ten_b", got)
	}
}

func waitPlacement(t *testing.T, s *Store, tenant string, check func(Placement) bool) Placement {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := s.Get(context.Background(), tenant)
		if err == nil && check(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: placement %+v, %v after 5 s", tenant, p, err)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

func TestRecorder(t *testing.T) {
	pool := testenv.Postgres(t)
	seed(t, pool)
	s := NewStore(pool)
	r := NewRecorder(s, RecorderOptions{RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	r.Start(context.Background())
	t.Cleanup(func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})

	t.Run("reports coalesce to the highest epoch", func(t *testing.T) {
		r.Leading(Placement{TenantID: "ten_a", Leader: "node_1", Replicas: all3, Epoch: 7})
		r.Leading(Placement{TenantID: "ten_a", Leader: "node_2", Replicas: all3, Epoch: 6}) // late, lower
		waitPlacement(t, s, "ten_a", func(p Placement) bool { return p.Epoch == 7 && p.Leader == "node_1" })
	})
	t.Run("within an epoch, reports coalesce to the newest configuration", func(t *testing.T) {
		r.Leading(Placement{TenantID: "ten_a", Leader: "node_1", Replicas: []string{"node_1", "node_2"}, Epoch: 7, ConfigIndex: 30})
		r.Leading(Placement{TenantID: "ten_a", Leader: "node_1", Replicas: all3, Epoch: 7, ConfigIndex: 20}) // late, older
		waitPlacement(t, s, "ten_a", func(p Placement) bool { return p.ConfigIndex == 30 })
		waitPending(t, r)
		if p, _ := s.Get(context.Background(), "ten_a"); !slices.Equal(p.Replicas, []string{"node_1", "node_2"}) {
			t.Fatalf("an older configuration's report won: %+v", p)
		}
	})
	t.Run("a stale report is dropped, not retried", func(t *testing.T) {
		r.Leading(Placement{TenantID: "ten_a", Leader: "node_3", Replicas: all3, Epoch: 2})
		waitPending(t, r)
		if p, _ := s.Get(context.Background(), "ten_a"); p.Epoch != 7 || p.Leader != "node_1" {
			t.Fatalf("a stale report moved the placement: %+v", p)
		}
	})
	t.Run("a failed write is retried until it lands", func(t *testing.T) {
		// node_4 is not registered yet: the write fails on the foreign key.
		r.Leading(Placement{TenantID: "ten_b", Leader: "node_4", Replicas: []string{"node_4"}, Epoch: 1})
		if _, err := s.Get(context.Background(), "ten_b"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("recorded before node_4 exists: %v", err)
		}
		exec(t, pool, `INSERT INTO nodes (id, mqtt_addr, admin_addr, capacity) VALUES ('node_4', '127.0.0.1:4', '127.0.0.1:4', 10)`)
		waitPlacement(t, s, "ten_b", func(p Placement) bool { return p.Leader == "node_4" })
		waitPending(t, r)
	})
	t.Run("a deleted tenant's report is dropped", func(t *testing.T) {
		r.Leading(Placement{TenantID: "ten_gone", Leader: "node_1", Replicas: all3, Epoch: 1})
		waitPending(t, r)
	})
}

func waitPending(t *testing.T, r *Recorder) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.Pending() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes still pending after 5 s", r.Pending())
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}
