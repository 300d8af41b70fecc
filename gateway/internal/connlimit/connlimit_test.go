package connlimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"berth.dev/testenv"
)

// TestMain doubles as a separate gateway process for the SIGKILL test:
// with BERTH_CONNLIMIT_HELPER set it acquires leases, says "ready" and
// waits to be killed.
func TestMain(m *testing.M) {
	if os.Getenv("BERTH_CONNLIMIT_HELPER") != "" {
		os.Exit(helperGateway())
	}
	os.Exit(m.Run())
}

func helperGateway() int {
	opt, err := redis.ParseURL(os.Getenv("HELPER_REDIS_URL"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ttl, _ := time.ParseDuration(os.Getenv("HELPER_TTL"))
	n, _ := strconv.Atoi(os.Getenv("HELPER_N"))
	l, err := New(redis.NewClient(opt), Options{GatewayID: os.Getenv("HELPER_GW"), Prefix: os.Getenv("HELPER_PREFIX"), HeartbeatTTL: ttl})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	l.Start(context.Background())
	for range n {
		if _, err := l.Acquire(context.Background(), "ten_a", n); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	fmt.Println("ready")
	select {} // until SIGKILL
}

// leaseKey is the tenant's hash as the Limiter names it.
func leaseKey(rs testenv.RedisSpace, tenant string) string {
	return rs.Prefix + "leases:{" + tenant + "}"
}

func newLimiter(t *testing.T, rs testenv.RedisSpace, gw string, ttl time.Duration) *Limiter {
	t.Helper()
	l, err := New(rs.Client, Options{GatewayID: gw, Prefix: rs.Prefix, HeartbeatTTL: ttl, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l.Start(context.Background())
	t.Cleanup(func() {
		if err := l.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown %s: %v", gw, err)
		}
	})
	return l
}

func TestLimitAcrossGateways(t *testing.T) {
	rs := testenv.Redis(t)
	a := newLimiter(t, rs, "gw-a", 10*time.Second)
	b := newLimiter(t, rs, "gw-b", 10*time.Second)
	ctx := context.Background()
	const limit = 5
	var leases []*Lease
	steps := []struct {
		name    string
		l       *Limiter
		tenant  string
		wantErr error
		count   int
	}{
		{"a1", a, "ten_a", nil, 1},
		{"a2", a, "ten_a", nil, 2},
		{"a3", a, "ten_a", nil, 3},
		{"b1", b, "ten_a", nil, 4},
		{"b2", b, "ten_a", nil, 5},
		{"b3 over the limit", b, "ten_a", ErrLimit, 0},
		{"a4 over the limit", a, "ten_a", ErrLimit, 0},
		{"another tenant is separate", b, "ten_b", nil, 1},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			ls, err := s.l.Acquire(ctx, s.tenant, limit)
			if !errors.Is(err, s.wantErr) {
				t.Fatalf("Acquire error = %v, want %v", err, s.wantErr)
			}
			if err == nil {
				if ls.Count != s.count || ls.Degraded {
					t.Fatalf("Count = %d (degraded %v), want %d", ls.Count, ls.Degraded, s.count)
				}
				leases = append(leases, ls)
			}
		})
	}
	leases[0].Release() // one of a's
	leases[0].Release() // idempotent
	ls, err := b.Acquire(ctx, "ten_a", limit)
	if err != nil || ls.Count != 5 {
		t.Fatalf("after a release: %v, count %v", err, ls)
	}
	if _, err := b.Acquire(ctx, "ten_a", limit); !errors.Is(err, ErrLimit) {
		t.Fatalf("the freed slot was handed out twice: %v", err)
	}
	if got := rs.Client.HGetAll(ctx, leaseKey(rs, "ten_a")).Val(); got["gw-a"] != "2" || got["gw-b"] != "3" {
		t.Fatalf("Redis hash = %v, want gw-a 2, gw-b 3", got)
	}
	if a.Held("ten_a") != 2 || b.Held("ten_a") != 3 {
		t.Fatalf("Held a=%d b=%d, want 2 and 3", a.Held("ten_a"), b.Held("ten_a"))
	}
}

func TestConcurrentNeverOverLimit(t *testing.T) {
	rs := testenv.Redis(t)
	a := newLimiter(t, rs, "gw-a", 10*time.Second)
	b := newLimiter(t, rs, "gw-b", 10*time.Second)
	const limit = 7
	ctx := context.Background()

	t.Run("all at once, nobody releases", func(t *testing.T) {
		var admitted atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 50 {
			wg.Go(func() {
				l := a
				if i%2 == 1 {
					l = b
				}
				<-start
				_, err := l.Acquire(ctx, "ten_once", limit)
				switch {
				case err == nil:
					admitted.Add(1)
				case !errors.Is(err, ErrLimit):
					t.Errorf("Acquire: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := admitted.Load(); n != limit {
			t.Fatalf("admitted %d of 50, want exactly %d", n, limit)
		}
	})

	t.Run("churn", func(t *testing.T) {
		var inUse, peak, admitted atomic.Int32
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				l := a
				if i%2 == 1 {
					l = b
				}
				for range 20 {
					ls, err := l.Acquire(ctx, "ten_churn", limit)
					if errors.Is(err, ErrLimit) {
						continue
					}
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					admitted.Add(1)
					n := inUse.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					inUse.Add(-1) // before Release: the slot is given back only after
					ls.Release()
				}
			})
		}
		wg.Wait()
		if p := peak.Load(); p > limit {
			t.Fatalf("peak concurrent leases %d > limit %d", p, limit)
		}
		if admitted.Load() < limit {
			t.Fatalf("only %d admissions in 1000 attempts", admitted.Load())
		}
		if n, _ := rs.Client.HLen(ctx, leaseKey(rs, "ten_churn")).Result(); n != 0 {
			t.Fatalf("hash has %d fields after every lease was released, want 0", n)
		}
	})
}

func TestKilledGatewaySlotsFreed(t *testing.T) {
	rs := testenv.Redis(t)
	const limit, ttl = 3, time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BERTH_CONNLIMIT_HELPER=1", "HELPER_REDIS_URL="+rs.URL, "HELPER_PREFIX="+rs.Prefix,
		"HELPER_GW=gw-doomed", "HELPER_N="+strconv.Itoa(limit), "HELPER_TTL="+ttl.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("helper gateway: %q, %v", line, err)
	}

	survivor := newLimiter(t, rs, "gw-survivor", ttl)
	ctx := context.Background()
	if _, err := survivor.Acquire(ctx, "ten_a", limit); !errors.Is(err, ErrLimit) {
		t.Fatalf("with the helper holding all %d slots: %v, want ErrLimit", limit, err)
	}
	if err := cmd.Process.Signal(os.Kill); err != nil { // SIGKILL: no cleanup runs
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()
	deadline := killed.Add(5 * ttl)
	for {
		_, err := survivor.Acquire(ctx, "ten_a", limit)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLimit) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots of the killed gateway still held %v after SIGKILL (TTL %v)", time.Since(killed), ttl)
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
	t.Logf("slots freed %v after SIGKILL (heartbeat TTL %v)", time.Since(killed).Round(time.Millisecond), ttl)
	if got := rs.Client.HGet(ctx, leaseKey(rs, "ten_a"), "gw-doomed").Err(); !errors.Is(got, redis.Nil) {
		t.Fatalf("dead gateway's field still in the hash: %v", got)
	}
}

func TestRedisUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens here now
	for _, tc := range []struct {
		name       string
		failClosed bool
	}{{"fail open (default)", false}, {"fail closed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			l, err := New(rdb, Options{GatewayID: "gw", Timeout: 100 * time.Millisecond, FailClosed: tc.failClosed})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ls, err := l.Acquire(context.Background(), "ten_a", 1)
			if el := time.Since(start); el > time.Second {
				t.Fatalf("Acquire took %v with a 100 ms timeout", el)
			}
			if tc.failClosed {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("Acquire = %v, want ErrUnavailable", err)
				}
				if l.Held("ten_a") != 0 {
					t.Fatalf("Held = %d after a refusal", l.Held("ten_a"))
				}
				return
			}
			if err != nil || !ls.Degraded {
				t.Fatalf("Acquire = %+v, %v; want a degraded lease", ls, err)
			}
			if l.Held("ten_a") != 1 {
				t.Fatalf("Held = %d, want 1 (counted locally)", l.Held("ten_a"))
			}
			ls.Release()
			if l.Held("ten_a") != 0 {
				t.Fatalf("Held = %d after Release, want 0", l.Held("ten_a"))
			}
		})
	}
}

func TestDegradedAdmissionsReachRedisLater(t *testing.T) {
	rs := testenv.Redis(t)
	ctx := context.Background()
	l := newLimiter(t, rs, "gw-a", 10*time.Second)
	// Two admissions made while Redis was away, as Acquire records them.
	l.mu.Lock()
	c := l.tenantLocked("ten_a")
	c.held, c.pending = 2, 2
	l.mu.Unlock()
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rs.Client.HGet(ctx, leaseKey(rs, "ten_a"), "gw-a").Val(); got != "2" {
		t.Fatalf("count in Redis after refresh = %q, want 2", got)
	}
	// After a lapse (our heartbeat expired and another gateway dropped our
	// field) the refresh writes the absolute count back.
	rs.Client.Del(ctx, leaseKey(rs, "ten_a"))
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rs.Client.HGet(ctx, leaseKey(rs, "ten_a"), "gw-a").Val(); got != "2" {
		t.Fatalf("count in Redis after a lapse = %q, want 2", got)
	}
	if _, err := l.Acquire(ctx, "ten_a", 2); !errors.Is(err, ErrLimit) {
		t.Fatalf("Acquire at the limit: %v, want ErrLimit", err)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	rs := testenv.Redis(b)
	l, _ := New(rs.Client, Options{GatewayID: "gw", Prefix: rs.Prefix})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ls, err := l.Acquire(ctx, "ten_a", 1000)
		if err != nil {
			b.Fatal(err)
		}
		ls.Release()
	}
}

func TestRefreshKeepsHeldTenantsAlive(t *testing.T) {
	rs := testenv.Redis(t)
	ctx := context.Background()
	const ttl = 10 * time.Second
	l := newLimiter(t, rs, "gw-a", ttl)
	if _, err := l.Acquire(ctx, "ten_a", 5); err != nil {
		t.Fatal(err)
	}
	// A tenant whose connections just stay: no admissions, no releases.
	// Its hash is about to expire; the heartbeat refresh must extend it.
	key := leaseKey(rs, "ten_a")
	rs.Client.PExpire(ctx, key, 50*time.Millisecond)
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if pttl := rs.Client.PTTL(ctx, key).Val(); pttl < 2*ttl {
		t.Fatalf("hash TTL after refresh = %v, want about %v", pttl, 3*ttl)
	}
	if got := rs.Client.HGet(ctx, key, "gw-a").Val(); got != "1" {
		t.Fatalf("count = %q, want 1", got)
	}
}

// TestRefreshRepairsLostWrites: a count in Redis that differs from what
// this gateway holds while nothing is in flight (writes lost with a
// Sentinel failover, which keeps the heartbeat) is rewritten by the next
// refresh; so is a count dropped while the heartbeat had lapsed.
func TestRefreshRepairsLostWrites(t *testing.T) {
	rs := testenv.Redis(t)
	ctx := context.Background()
	l := newLimiter(t, rs, "gw-a", 10*time.Second)
	for range 3 {
		if _, err := l.Acquire(ctx, "ten_a", 5); err != nil {
			t.Fatal(err)
		}
	}
	key := leaseKey(rs, "ten_a")
	for _, tc := range []struct {
		name string
		lose func()
	}{
		{"one admission lost, heartbeat kept", func() { rs.Client.HSet(ctx, key, "gw-a", 2) }},
		{"count and heartbeat dropped", func() { rs.Client.HDel(ctx, key, "gw-a", "hb:gw-a") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.lose()
			if err := l.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := rs.Client.HGet(ctx, key, "gw-a").Val(); got != "3" {
				t.Fatalf("count after the refresh = %q, want 3", got)
			}
			if ls, err := l.Acquire(ctx, "ten_a", 5); err != nil || ls.Count != 4 {
				t.Fatalf("next admission = %+v, %v; want count 4", ls, err)
			} else {
				ls.Release()
			}
		})
	}
}
