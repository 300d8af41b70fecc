// Command berthctl talks to a Berth API as a user would.
//
//	berthctl demo -api http://127.0.0.1:8080 [-email E -password P]
//
// demo signs up (signup answers alike whether or not the account exists),
// logs in, makes an API key and a device credential allowed to publish and
// subscribe under demo/# in the account's first tenant, and prints the
// values as shell variable assignments: BERTH_API_URL, BERTH_API_KEY,
// BERTH_TENANT_ID, BERTH_MQTT_ADDR, BERTH_MQTT_USERNAME, BERTH_MQTT_PASSWORD.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "demo" {
		fmt.Fprintln(os.Stderr, "usage: berthctl demo -api URL [-email E -password P]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	api := fs.String("api", envOr("BERTH_API_URL", "http://127.0.0.1:8080"), "API base URL (env BERTH_API_URL)")
	email := fs.String("email", "demo@berth.localhost", "demo account email")
	password := fs.String("password", envOr("BERTH_DEMO_PASSWORD", "berth-demo-password"), "demo account password (env BERTH_DEMO_PASSWORD)")
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := demo(ctx, &client{base: strings.TrimRight(*api, "/"), http: &http.Client{Timeout: 10 * time.Second}}, *email, *password)
	if err != nil {
		fmt.Fprintln(os.Stderr, "berthctl:", err)
		os.Exit(1)
	}
	fmt.Print(out)
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

type client struct {
	base string
	http *http.Client
}

// statusError is a non-2xx answer.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

func (c *client) do(ctx context.Context, method, path, bearer string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return &statusError{resp.StatusCode, strings.TrimSpace(string(raw))}
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// demo returns the demo environment, creating the account on first use.
// Signup answers 202 whether it created the account or the email had one
// already (a second make run): the login that follows tells, failing for
// an existing account with another password.
func demo(ctx context.Context, c *client, email, password string) (string, error) {
	creds := map[string]string{"email": email, "password": password}
	if err := c.do(ctx, "POST", "/v1/signup", "", creds, nil); err != nil {
		return "", fmt.Errorf("signup: %w", err)
	}
	var login struct {
		Token string `json:"token"`
	}
	if err := c.do(ctx, "POST", "/v1/login", "", creds, &login); err != nil {
		return "", fmt.Errorf("login (an account with this email and another password exists?): %w", err)
	}
	var k struct {
		Secret string `json:"secret"`
	}
	if err := c.do(ctx, "POST", "/v1/api-keys", login.Token, map[string]string{"name": "berthctl demo"}, &k); err != nil {
		return "", fmt.Errorf("api key: %w", err)
	}
	key := k.Secret
	var tenants struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if err := c.do(ctx, "GET", "/v1/tenants", key, nil, &tenants); err != nil {
		return "", fmt.Errorf("tenants: %w", err)
	}
	if len(tenants.Items) == 0 {
		return "", fmt.Errorf("tenants: the account has none")
	}
	tenant := tenants.Items[0].ID
	var cred struct {
		Username string `json:"username"`
		Password string `json:"password"`
		MQTTAddr string `json:"mqtt_addr"`
	}
	body := map[string]any{"name": "demo device", "acl": map[string][]string{"pub": {"demo/#"}, "sub": {"demo/#"}}}
	if err := c.do(ctx, "POST", "/v1/tenants/"+tenant+"/credentials", key, body, &cred); err != nil {
		return "", fmt.Errorf("credential: %w", err)
	}
	var b strings.Builder
	for _, kv := range [][2]string{
		{"BERTH_API_URL", c.base}, {"BERTH_API_KEY", key}, {"BERTH_TENANT_ID", tenant},
		{"BERTH_MQTT_ADDR", cred.MQTTAddr}, {"BERTH_MQTT_USERNAME", cred.Username}, {"BERTH_MQTT_PASSWORD", cred.Password},
	} {
		fmt.Fprintf(&b, "%s='%s'\n", kv[0], strings.ReplaceAll(kv[1], "'", `'\''`))
	}
	return b.String(), nil
}
