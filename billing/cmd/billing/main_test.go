package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/testenv"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestWorkerProcesses runs two real worker processes on one database: the
// first leads and drafts the running month's invoice, the second waits;
// the first is killed (SIGKILL) and the second takes over; SIGTERM stops
// it gracefully (exit 0).
func TestWorkerProcesses(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "billing")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dbURL := testenv.DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `INSERT INTO accounts (id, email, password_hash) VALUES ('acc_p', 'p@example.com', 'x');
		INSERT INTO tenants (id, account_id, slug, plan) VALUES ('ten_p', 'acc_p', 'p', 'pro')`); err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, *testenv.LogBuffer) {
		var out testenv.LogBuffer
		cmd := exec.Command(bin, "-interval", "1h", "-leader-poll", "50ms", "-log-format", "text")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, &out
	}
	leads := func(out *testenv.LogBuffer) func() bool {
		return func() bool { return strings.Contains(out.String(), "billing worker leads") }
	}

	first, out1 := start()
	waitFor(t, "the first worker to lead", leads(out1))
	var drafts int
	waitFor(t, "the running month's draft", func() bool {
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM invoices WHERE account_id = 'acc_p' AND status = 'draft'
			AND month = date_trunc('month', now(), 'UTC')`).Scan(&drafts)
		return drafts == 1
	})
	if !strings.Contains(out1.String(), "payment is disabled") {
		t.Errorf("the worker does not say payment is disabled:\n%s", out1)
	}
	second, out2 := start()
	waitFor(t, "the second worker to start", func() bool { return strings.Contains(out2.String(), "starting") })
	if leads(out2)() {
		t.Fatalf("two workers lead:\n%s", out2)
	}

	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	waitFor(t, "the second worker to take over from the killed one", leads(out2))

	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, out2)
	}
	if !strings.Contains(out2.String(), "billing worker stopped") {
		t.Fatalf("no graceful stop in the log:\n%s", out2)
	}
}

// With -now after the running month's end and grace, the worker bills as
// if it were then: the month's invoice is issued (numbered, final) at
// once, though the real month still runs.
func TestNowClosesTheRunningMonth(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "billing")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dbURL := testenv.DatabaseURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `INSERT INTO accounts (id, email, password_hash) VALUES ('acc_n', 'n@example.com', 'x');
		INSERT INTO tenants (id, account_id, slug, plan) VALUES ('ten_n', 'acc_n', 'n', 'pro')`); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	clock := month.AddDate(0, 1, 0).Add(time.Hour + time.Second) // past the month's end and the default 1 h grace
	var out testenv.LogBuffer
	cmd := exec.Command(bin, "-interval", "1h", "-log-format", "text", "-now", clock.Format(time.RFC3339))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var status string
	var number *int64
	waitFor(t, "the running month's invoice to be issued", func() bool {
		_ = pool.QueryRow(ctx, `SELECT status, number FROM invoices WHERE account_id = 'acc_n' AND month = $1`, month).Scan(&status, &number)
		return status == "final"
	})
	if number == nil || *number != 1 {
		t.Fatalf("issued invoice number %v, want 1", number)
	}
	if !strings.Contains(out.String(), "the worker's clock is set") {
		t.Errorf("the worker does not say its clock is set:\n%s", out.String())
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, out.String())
	}
}
