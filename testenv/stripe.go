package testenv

import (
	"net/http"
	"os"
	"testing"
	"time"
)

// DefaultStripeURL is where infra/dev/stripe-mock.sh runs Stripe's
// stripe-mock.
const DefaultStripeURL = "http://127.0.0.1:63792"

// StripeURL returns the base URL of a running stripe-mock (Stripe's own
// mock of its API: real request validation and fixture responses, no
// state), from BERTH_TEST_STRIPE_URL or DefaultStripeURL, and fails the
// test when none answers. `make test` starts one (with-services.sh).
func StripeURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("BERTH_TEST_STRIPE_URL")
	if u == "" {
		u = DefaultStripeURL
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u + "/v1/customers")
	if err != nil {
		t.Fatalf("testenv: stripe-mock at %s is unreachable (%v); run `make test`, or infra/dev/stripe-mock.sh start before `go test`", u, err)
	}
	resp.Body.Close()
	return u
}
