package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// dashboardTimeout bounds the whole browser suite (both Playwright runs).
const dashboardTimeout = 8 * time.Minute

// TestDashboardInChromium drives the dashboard the API serves through
// Debian's Chromium with Playwright (web/tests): the specs sign up, make
// credentials, publish through the gateway with mosquitto_pub and check
// what every page shows, then measure the pages (lines starting "PERF ").
// The browser specs run in two passes: the page specs on two workers, then
// the perf specs alone so that nothing else competes for the two cores
// while they measure.
//
// It runs on its own (no t.Parallel) for the same reason.
func TestDashboardInChromium(t *testing.T) {
	web, err := filepath.Abs(filepath.Join("..", "web"))
	if err != nil {
		t.Fatal(err)
	}
	for _, need := range []string{"dist/index.html", "node_modules/.bin/playwright"} {
		if _, err := os.Stat(filepath.Join(web, need)); err != nil {
			t.Fatalf("web/%s is missing: run `make web` (npm ci && npm run build in web/), then the tests again", need)
		}
	}
	if _, err := exec.LookPath("/usr/bin/chromium"); err != nil {
		t.Fatalf("/usr/bin/chromium is missing: apt-get install -y chromium")
	}

	// The perf spec moves its tenant to business, so the plans are open
	// to every account here (-open-plans). The API takes payment through
	// stripe-mock (the Billing page's Stripe Checkout); a second API on the
	// same database runs without a Stripe key, for the page without
	// payment (BERTH_E2E_API_NO_PAYMENT).
	s := stack.New(t, bins, stack.Options{OpenPlans: "free,pro,business", Stripe: true})
	checkServesDashboard(t, s.API)
	noPayment, _ := s.StartAPIWithoutPayment(t)

	ctx, cancel := context.WithTimeout(context.Background(), dashboardTimeout)
	defer cancel()
	env := append(os.Environ(),
		"BERTH_E2E_API="+s.API,
		"BERTH_E2E_API_NO_PAYMENT="+noPayment,
		"BERTH_E2E_STRIPE_WEBHOOK_SECRET="+s.StripeWebhookSecret,
		"BERTH_E2E_MQTT="+s.Gateways[0].MQTT,
		"BERTH_E2E_WS="+s.Gateways[0].WS,
		"BERTH_E2E_DATABASE_URL="+s.DatabaseURL,
		"FORCE_COLOR=0",
		"CI=1",
	)
	t.Run("pages", func(t *testing.T) {
		runPlaywright(ctx, t, web, env, "--project=desktop", "--project=mobile", "--output=test-results/playwright")
	})
	t.Run("perf", func(t *testing.T) {
		// Its own output folder: Playwright empties the folder a run starts with.
		runPlaywright(ctx, t, web, env, "--project=perf", "--workers=1", "--output=test-results/playwright-perf")
	})
}

// checkServesDashboard fails at once, with the fix, when the API binary was
// built before web/dist (go:embed reads it at build time).
func checkServesDashboard(t *testing.T, api string) {
	t.Helper()
	resp, err := http.Get(api + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `<div id="app">`) {
		t.Fatalf("GET / on the api: %d %q: the api binary holds no dashboard build: run `make web`, then the tests again", resp.StatusCode, body)
	}
}

// runPlaywright runs the Playwright CLI in web with args, streaming its
// output into the test log line by line; a non-zero exit fails t. On the
// deadline the whole process group (Playwright, its workers, Chromium) is
// killed.
func runPlaywright(ctx context.Context, t *testing.T, web string, env []string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(web, "node_modules", ".bin", "playwright"), append([]string{"test"}, args...)...)
	cmd.Dir = web
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			t.Log(sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr) // a line past the buffer: keep the pipe flowing
	}()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		pw.Close()
		wg.Wait()
		t.Fatalf("start playwright: %v", err)
	}
	err := cmd.Wait()
	pw.Close()
	wg.Wait()
	// Chromium or a worker left behind in the group would outlive the test.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	switch {
	case ctx.Err() != nil:
		t.Fatalf("playwright %s: no result within %v (%v)", strings.Join(args, " "), dashboardTimeout, err)
	case err != nil:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("playwright %s failed after %v: exit code %d (failures above)", strings.Join(args, " "), time.Since(start).Round(time.Second), exit.ExitCode())
		}
		t.Fatalf("playwright %s: %v", strings.Join(args, " "), err)
	}
}
