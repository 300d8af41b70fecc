package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"berth.dev/migrations"
)

// PostgresServer is a Postgres cluster of one test's own, for fault tests
// that stop and start it under load (the shared dev cluster is never
// stopped). Its data lives in a temporary folder; the server listens on
// 127.0.0.1:Port, which stays the same across Stop and Start. The cluster
// is stopped and deleted when the test ends.
type PostgresServer struct {
	Port int
	// URL is a database of its own holding the full Berth schema.
	URL string

	bin  string // folder of pg_ctl, initdb
	dir  string // socket folder and log
	data string
	mu   sync.Mutex
}

// NewPostgresServer initializes a cluster (initdb, as the postgres user
// when the test runs as root: Postgres refuses to run as root), starts it,
// and creates a migrated database in it. It takes a few seconds.
func NewPostgresServer(t testing.TB) *PostgresServer {
	t.Helper()
	bin, err := postgresBin()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	dir, err := os.MkdirTemp("", "berth-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s := &PostgresServer{Port: freePort(t), bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	t.Cleanup(func() {
		s.stop("immediate")
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.chownToPostgres(dir); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if out, err := s.command("initdb", "-D", s.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	s.Start(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, s.adminURL())
	if err != nil {
		t.Fatalf("testenv: private Postgres: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE berth"); err != nil {
		t.Fatalf("testenv: private Postgres: %v", err)
	}
	s.URL = withDatabase(s.adminURL(), "berth")
	if err := migrations.Up(ctx, s.URL); err != nil {
		t.Fatalf("testenv: migrate private Postgres: %v", err)
	}
	return s
}

func (s *PostgresServer) adminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
}

// Start starts the stopped server on its port and returns once it
// accepts connections.
func (s *PostgresServer) Start(t testing.TB) {
	t.Helper()
	s.start(t, "127.0.0.1")
}

// StartLocal starts the stopped server on its Unix socket only: to the
// processes that reach it over TCP it is still down, while the test
// changes rows through SocketURL (say, what a NOTIFY would have announced
// while nobody listened). Stop it before Start.
func (s *PostgresServer) StartLocal(t testing.TB) {
	t.Helper()
	s.start(t, "")
}

// SocketURL is URL's database over the server's Unix socket.
func (s *PostgresServer) SocketURL() string {
	return fmt.Sprintf("postgres://postgres@/berth?host=%s&port=%d&sslmode=disable", s.dir, s.Port)
}

func (s *PostgresServer) start(t testing.TB, listen string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses='%s' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", s.Port, s.dir, listen)
	cmd := s.command("pg_ctl", "-D", s.data, "-l", filepath.Join(s.dir, "postgres.log"), "-w", "-t", "60", "-o", opts, "start")
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		t.Fatalf("testenv: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

// Stop shuts the server down with pg_ctl's fast mode: every client
// connection is terminated at once, as in a restart or failover.
func (s *PostgresServer) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop("fast"); err != nil {
		t.Fatalf("testenv: pg_ctl stop: %v", err)
	}
}

func (s *PostgresServer) stop(mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.command("pg_ctl", "-D", s.data, "status").Run(); err != nil {
		return nil // not running
	}
	if out, err := s.command("pg_ctl", "-D", s.data, "-m", mode, "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// command runs a Postgres program, as the postgres user when this process
// is root.
func (s *PostgresServer) command(name string, args ...string) *exec.Cmd {
	prog := filepath.Join(s.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", prog}, args...)...)
	}
	return exec.Command(prog, args...)
}

func (s *PostgresServer) chownToPostgres(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

// postgresBin finds the folder of the server programs, as
// infra/dev/postgres.sh does.
func postgresBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Dir(r), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("Postgres server programs not found (make dev-up installs them)")
}

// RedisServer is a redis-server of one test's own, for fault tests that
// stop and start it (the shared dev Redis is never stopped). It runs
// without persistence on 127.0.0.1:Port, the same port across Stop and
// Start, as a child process stopped when the test ends.
type RedisServer struct {
	Port int
	URL  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// NewRedisServer starts a private redis-server.
func NewRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("testenv: redis-server not found (make dev-up installs it): %v", err)
	}
	s := &RedisServer{Port: freePort(t)}
	s.URL = fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port)
	t.Cleanup(func() { s.Stop(t) })
	s.Start(t)
	return s
}

// Start runs redis-server on the server's port and returns once it
// answers PING.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		t.Fatal("testenv: redis-server already running")
	}
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(s.Port),
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", os.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done

	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		// A plain dial first: go-redis logs every refused dial of its pool.
		err := dialOnce(c.Options().Addr)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = c.Ping(ctx).Err()
			cancel()
			if err == nil {
				return
			}
		}
		select {
		case <-done:
			t.Fatalf("testenv: redis-server exited at start: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: redis-server not answering after 15 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dialOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	return c.Close()
}

// Stop ends redis-server with SIGKILL, as a crash or a lost host would;
// its keys are gone (no persistence).
func (s *RedisServer) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd, s.done = nil, nil
}

// freePort picks a loopback port that was free a moment ago, below the
// kernel's ephemeral range and below the range e2e's stack hands out
// (20000 and up), so a server restarted on it is unlikely to find it
// taken by an outgoing connection meanwhile.
func freePort(t testing.TB) int {
	t.Helper()
	const low, high = 12000, 20000
	start := low + rand.IntN(high-low)
	for i := range high - low {
		port := low + (start-low+i)%(high-low)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("testenv: no free loopback port")
	return 0
}
