// Package redisproc starts real redis-server processes for tests: a
// single server, a master with a replica watched by a sentinel, or a
// three-master cluster. Everything listens on 127.0.0.1 on free ports,
// keeps its files in t.TempDir() and is stopped by PID in t.Cleanup.
// redis-server is installed by infra/dev/redis.sh (make dev-up).
package redisproc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	Addr string // 127.0.0.1:port
	Port int
	Dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start runs redis-server on a free port with no persistence and the
// extra config directives in args ("--name value" pairs), and waits until
// it answers PING.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, "", args...)
}

func start(t testing.TB, conf string, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redisproc: redis-server not found (infra/dev/redis.sh start installs it): %v", err)
	}
	port := FreePort(t)
	dir := t.TempDir()
	var argv []string
	if conf != "" {
		argv = append(argv, conf)
	}
	argv = append(argv, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--logfile", filepath.Join(dir, "redis.log"))
	argv = append(argv, args...)
	cmd := exec.Command(bin, argv...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("redisproc: %v", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	t.Cleanup(s.Stop)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	err = Poll(10*time.Second, func() error {
		select {
		case <-s.done:
			return fmt.Errorf("exited: %s", s.Log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	})
	if err != nil {
		t.Fatalf("redisproc: redis-server on %s did not start: %v", s.Addr, err)
	}
	return s
}

// Stop kills the process (SIGKILL, by its PID) and waits for it. It is
// idempotent.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Log returns the server's log file.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// Client returns a plain client of this one server, closed at cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// Poll calls f until it returns nil, every 20 ms, for at most d; it
// returns f's last error when d runs out.
func Poll(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond) // polling with a deadline
	}
}

// Sentinel is a master with one replica, watched by one sentinel.
type Sentinel struct {
	Master, Replica, Sentinel *Server
	Name                      string // the master's name at the sentinel
}

// StartSentinel starts the master, its replica (in sync before it
// returns) and a sentinel that knows both, with a quorum of one and a
// one-second down-after.
func StartSentinel(t testing.TB, name string) *Sentinel {
	t.Helper()
	m := Start(t, "--repl-diskless-sync-delay", "0")
	r := Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(m.Port))
	rc := r.Client(t)
	if err := Poll(10*time.Second, func() error { return linkUp(rc) }); err != nil {
		t.Fatalf("redisproc: replica not in sync: %v", err)
	}
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 10000\n",
		name, m.Port, name, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := start(t, conf, "--sentinel")
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { sc.Close() })
	err := Poll(10*time.Second, func() error {
		reps, err := sc.Replicas(context.Background(), name).Result()
		if err != nil {
			return err
		}
		if len(reps) != 1 || reps[0]["flags"] != "slave" {
			return fmt.Errorf("sentinel sees replicas %v", reps)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redisproc: sentinel does not know the replica: %v", err)
	}
	return &Sentinel{Master: m, Replica: r, Sentinel: s, Name: name}
}

func linkUp(c *redis.Client) error {
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("link down")
	}
	return nil
}

// Failover asks the sentinel to promote the replica (SENTINEL FAILOVER)
// and waits until the sentinel names it as the master.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer sc.Close()
	ctx := context.Background()
	// NOGOODSLAVE while the sentinel's view of the replica is stale: retry.
	if err := Poll(10*time.Second, func() error { return sc.Failover(ctx, s.Name).Err() }); err != nil {
		t.Fatalf("redisproc: SENTINEL FAILOVER: %v", err)
	}
	err := Poll(15*time.Second, func() error {
		addr, err := sc.GetMasterAddrByName(ctx, s.Name).Result()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[1] != strconv.Itoa(s.Replica.Port) {
			return fmt.Errorf("master still %v", addr)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redisproc: failover did not complete: %v", err)
	}
}

// StartCluster starts n masters with cluster mode on, splits the 16384
// slots between them in ranges, joins them (CLUSTER MEET) and waits for
// cluster_state:ok on every node.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	ctx := context.Background()
	nodes := make([]*Server, n)
	bus := make([]int, n) // cluster bus ports, not port+10000: that may be taken
	for i := range nodes {
		bus[i] = FreePort(t)
		nodes[i] = Start(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus[i]),
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
	}
	for i, s := range nodes {
		c := s.Client(t)
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("redisproc: CLUSTER ADDSLOTSRANGE: %v", err)
		}
		if i > 0 {
			if err := c.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", nodes[0].Port, bus[0]).Err(); err != nil {
				t.Fatalf("redisproc: CLUSTER MEET: %v", err)
			}
		}
	}
	for _, s := range nodes {
		c := s.Client(t)
		err := Poll(15*time.Second, func() error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				return fmt.Errorf("not ready: %s", info)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("redisproc: cluster on %s: %v", s.Addr, err)
		}
	}
	return nodes
}
