package connlimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"berth.dev/gateway/internal/redisconn"
	"berth.dev/gateway/internal/redisproc"
)

// client builds the gateway's client for cfg, as cmd/gateway does.
func client(t *testing.T, cfg redisconn.Config) redis.UniversalClient {
	t.Helper()
	cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout = time.Second, 500*time.Millisecond, 500*time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rdb, err := cfg.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func startLimiter(t *testing.T, rdb redis.UniversalClient, opt Options) *Limiter {
	t.Helper()
	if opt.Prefix == "" {
		opt.Prefix = "t:"
	}
	if opt.Timeout == 0 {
		opt.Timeout = 2 * time.Second
	}
	l, err := New(rdb, opt)
	if err != nil {
		t.Fatal(err)
	}
	l.Start(context.Background())
	t.Cleanup(func() { l.Shutdown(context.Background()) })
	return l
}

// TestModes runs the same lease behaviour against a single Redis by URL,
// a master behind Redis Sentinel and a three-master Redis Cluster, each a
// real redis-server started by the test, through the client the gateway
// builds (redisconn).
func TestModes(t *testing.T) {
	modes := []struct {
		name  string
		start func(t *testing.T) redisconn.Config
	}{
		{"url", func(t *testing.T) redisconn.Config {
			return redisconn.Config{URL: "redis://" + redisproc.Start(t).Addr + "/0"}
		}},
		{"sentinel", func(t *testing.T) redisconn.Config {
			s := redisproc.StartSentinel(t, "berth")
			return redisconn.Config{SentinelMaster: s.Name, Addrs: s.Sentinel.Addr}
		}},
		{"cluster", func(t *testing.T) redisconn.Config {
			nodes := redisproc.StartCluster(t, 3)
			return redisconn.Config{Cluster: true, Addrs: nodes[0].Addr} // one seed finds the rest
		}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			start := time.Now()
			rdb := client(t, m.start(t))
			t.Logf("%s: Redis up in %v", m.name, time.Since(start).Round(time.Millisecond))
			leaseBehaviour(t, rdb)
		})
	}
}

func leaseBehaviour(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	a := startLimiter(t, rdb, Options{GatewayID: "gw-a"})
	b := startLimiter(t, rdb, Options{GatewayID: "gw-b"})
	const limit = 3
	tenants := []string{"ten_0", "ten_1", "ten_2", "ten_3", "ten_4", "ten_5"}

	t.Run("acquire and release across gateways", func(t *testing.T) {
		for _, tn := range tenants {
			var held []*Lease
			for i, l := range []*Limiter{a, a, b} {
				ls, err := l.Acquire(ctx, tn, limit)
				if err != nil || ls.Degraded || ls.Count != i+1 {
					t.Fatalf("%s: admission %d = %+v, %v; want count %d", tn, i+1, ls, err, i+1)
				}
				held = append(held, ls)
			}
			for _, l := range []*Limiter{a, b} {
				if _, err := l.Acquire(ctx, tn, limit); !errors.Is(err, ErrLimit) {
					t.Fatalf("%s: over the limit: %v, want ErrLimit", tn, err)
				}
			}
			held[0].Release()
			if ls, err := b.Acquire(ctx, tn, limit); err != nil || ls.Count != limit {
				t.Fatalf("%s: after a release: %+v, %v", tn, ls, err)
			}
			if got := rdb.HGet(ctx, "t:leases:{"+tn+"}", "gw-b").Val(); got != "2" {
				t.Fatalf("%s: gw-b's count in Redis = %q, want 2", tn, got)
			}
		}
	})

	if cc, ok := rdb.(*redis.ClusterClient); ok {
		t.Run("tenants spread over the cluster", func(t *testing.T) {
			masters := map[string]bool{}
			for _, tn := range tenants {
				m, err := cc.MasterForKey(ctx, "t:leases:{"+tn+"}")
				if err != nil {
					t.Fatal(err)
				}
				masters[m.Options().Addr] = true
			}
			if len(masters) < 2 {
				t.Fatalf("%d tenants' leases all on %v", len(tenants), masters)
			}
			t.Logf("%d tenants' leases on %d masters", len(tenants), len(masters))
		})
	}

	t.Run("a dead gateway's slots expire", func(t *testing.T) {
		// Never started: nothing refreshes its heartbeat, as after SIGKILL.
		const ttl = 300 * time.Millisecond
		doomed, err := New(rdb, Options{GatewayID: "gw-doomed", Prefix: "t:", HeartbeatTTL: ttl, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for range limit {
			if _, err := doomed.Acquire(ctx, "ten_x", limit); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.Acquire(ctx, "ten_x", limit); !errors.Is(err, ErrLimit) {
			t.Fatalf("while the doomed gateway holds every slot: %v", err)
		}
		stopped := time.Now()
		err = redisproc.Poll(5*time.Second, func() error {
			_, err := a.Acquire(ctx, "ten_x", limit)
			return err
		})
		if err != nil {
			t.Fatalf("slots still held %v after the heartbeat stopped (TTL %v): %v", time.Since(stopped), ttl, err)
		}
		t.Logf("slots freed %v after the last heartbeat (TTL %v)", time.Since(stopped).Round(time.Millisecond), ttl)
		if err := rdb.HGet(ctx, "t:leases:{ten_x}", "gw-doomed").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("dead gateway's count still in the hash: %v", err)
		}
	})

	t.Run("shutdown removes the gateway's leases", func(t *testing.T) {
		if err := b.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		for _, tn := range tenants {
			h := rdb.HGetAll(ctx, "t:leases:{"+tn+"}").Val()
			if _, ok := h["gw-b"]; ok {
				t.Fatalf("%s: gw-b still in %v after Shutdown", tn, h)
			}
			if _, ok := h["hb:gw-b"]; ok {
				t.Fatalf("%s: gw-b's heartbeat still in %v after Shutdown", tn, h)
			}
		}
	})
}

// TestSentinelFailover promotes the replica (SENTINEL FAILOVER) under a
// live limiter: the client follows the new master; an admission made in
// the failover's window (it may land on the old master and be lost with
// its demotion) is reconciled by the next heartbeat refresh; admissions
// and releases keep working. The limiter fails closed here so that every
// admission's outcome is Redis's.
func TestSentinelFailover(t *testing.T) {
	s := redisproc.StartSentinel(t, "berth")
	rdb := client(t, redisconn.Config{SentinelMaster: s.Name, Addrs: s.Sentinel.Addr})
	ctx := context.Background()
	l := startLimiter(t, rdb, Options{GatewayID: "gw-a", Timeout: 500 * time.Millisecond, FailClosed: true})
	const limit = 4
	var held []*Lease
	for range 2 {
		ls, err := l.Acquire(ctx, "ten_f", limit)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls)
	}
	if n, err := rdb.Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}

	start := time.Now()
	s.Failover(t)
	switched := time.Since(start)
	// In the window: the old master may still take it.
	ls, err := l.Acquire(ctx, "ten_f", limit)
	if err == nil {
		held = append(held, ls)
	}
	t.Logf("admission in the failover window: %v", err)
	newMaster := fmt.Sprintf("tcp_port:%d\r", s.Replica.Port)
	err = redisproc.Poll(15*time.Second, func() error {
		info, err := rdb.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, newMaster) {
			return errors.New("client still on the old master")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("client not on the new master %v after SENTINEL FAILOVER: %v", time.Since(start), err)
	}
	followed := time.Since(start)
	newc := s.Replica.Client(t)
	before := newc.HGet(ctx, "t:leases:{ten_f}", "gw-a").Val()
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("heartbeat refresh on the new master: %v", err)
	}
	if got := newc.HGet(ctx, "t:leases:{ten_f}", "gw-a").Val(); got != fmt.Sprint(len(held)) {
		t.Fatalf("count on the new master after a refresh = %q, want %d (held)", got, len(held))
	}
	for len(held) < limit {
		ls, err := l.Acquire(ctx, "ten_f", limit)
		if err != nil || ls.Count != len(held)+1 {
			t.Fatalf("admission on the new master: %+v, %v; want count %d", ls, err, len(held)+1)
		}
		held = append(held, ls)
	}
	admitted := time.Since(start)
	if _, err := l.Acquire(ctx, "ten_f", limit); !errors.Is(err, ErrLimit) {
		t.Fatalf("at the limit after the failover: %v, want ErrLimit", err)
	}
	held[0].Release()
	if ls, err := l.Acquire(ctx, "ten_f", limit); err != nil || ls.Count != limit {
		t.Fatalf("after a release on the new master: %+v, %v", ls, err)
	}
	t.Logf("sentinel named the new master %v after SENTINEL FAILOVER, the client followed at %v, admitting again at %v (count on the new master before the refresh %q, after %d)",
		switched.Round(time.Millisecond), followed.Round(time.Millisecond), admitted.Round(time.Millisecond), before, len(held))
}
