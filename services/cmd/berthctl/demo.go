package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"berth.dev/services/apiclient"
)

const demoCredentialName = "demo device"

func runDemo(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "demo", "[--email E] [--password P]",
		"  eval \"$(berthctl demo)\"; mosquitto_sub -h \"${BERTH_MQTT_ADDR%:*}\" -p \"${BERTH_MQTT_ADDR##*:}\" -u \"$BERTH_MQTT_USERNAME\" -P \"$BERTH_MQTT_PASSWORD\" -t 'demo/#'").withAPI()
	email := f.String("email", "demo@berth.localhost", "demo account email")
	password := f.String("password", e.envOr("BERTH_DEMO_PASSWORD", "berth-demo-password"), "demo account password (env BERTH_DEMO_PASSWORD)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	cfg, err := loadConfig(e)
	if err != nil {
		return err
	}
	base := apiURL(e, *f.api, &config{})
	out, err := demo(ctx, e, cfg, apiclient.New(base, ""), *email, *password)
	if err != nil {
		return err
	}
	fmt.Fprint(e.stdout, out)
	return nil
}

// demo returns the demo environment as shell assignments. The first run
// signs up (signup answers alike whether or not the account exists), logs
// in and makes an API key, kept in the config file; later runs reuse it and
// the "demo device" credential, issuing it a fresh token.
func demo(ctx context.Context, e *env, cfg *config, api *apiclient.Client, email, password string) (string, error) {
	var tenants apiclient.List[apiclient.Tenant]
	if d := cfg.Demo; d != nil && d.API == api.Base && d.Email == email {
		api.Token = d.APIKey
		err := api.Call(ctx, apiclient.ListTenants, nil, nil, nil, &tenants)
		var ae *apiclient.Error
		if err != nil && !(errors.As(err, &ae) && ae.Status == 401) {
			return "", fmt.Errorf("tenants: %w", err)
		}
		if err != nil {
			api.Token = "" // the key was revoked or the database reset: start over
		}
	}
	if api.Token == "" {
		creds := map[string]string{"email": email, "password": password}
		if err := api.Call(ctx, apiclient.Signup, nil, nil, creds, nil); err != nil {
			return "", fmt.Errorf("signup: %w", err)
		}
		var s apiclient.Session
		if err := api.Call(ctx, apiclient.Login, nil, nil, creds, &s); err != nil {
			return "", fmt.Errorf("login (an account with this email and another password exists?): %w", err)
		}
		var k apiclient.APIKey
		if err := apiclient.New(api.Base, s.Token).Call(ctx, apiclient.CreateAPIKey, nil, nil, map[string]string{"name": "berthctl demo"}, &k); err != nil {
			return "", fmt.Errorf("api key: %w", err)
		}
		api.Token = k.Secret
		cfg.Demo = &demoState{API: api.Base, Email: email, APIKey: k.Secret}
		if err := cfg.save(e); err != nil {
			return "", err
		}
		if err := api.Call(ctx, apiclient.ListTenants, nil, nil, nil, &tenants); err != nil {
			return "", fmt.Errorf("tenants: %w", err)
		}
	}
	if len(tenants.Items) == 0 {
		return "", fmt.Errorf("tenants: the account has none")
	}
	t := tenants.Items[0]
	user, pw, err := demoCredential(ctx, api, t.ID)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, kv := range [][2]string{
		{"BERTH_API_URL", api.Base}, {"BERTH_API_KEY", api.Token}, {"BERTH_TENANT_ID", t.ID},
		{"BERTH_MQTT_ADDR", t.Endpoints.MQTT}, {"BERTH_MQTT_USERNAME", user}, {"BERTH_MQTT_PASSWORD", pw},
	} {
		fmt.Fprintf(&b, "%s='%s'\n", kv[0], strings.ReplaceAll(kv[1], "'", `'\''`))
	}
	return b.String(), nil
}

// demoCredential reuses the tenant's "demo device" credential (a new
// token), or makes it once, allowed demo/#.
func demoCredential(ctx context.Context, api *apiclient.Client, tid string) (user, pw string, err error) {
	creds, err := allItems[apiclient.Credential](ctx, api, apiclient.ListCredentials, []string{tid})
	if err != nil {
		return "", "", fmt.Errorf("credentials: %w", err)
	}
	for _, c := range creds {
		if c.Name == demoCredentialName && c.RevokedAt == nil && c.ExpiresAt == nil {
			var tok apiclient.IssuedToken
			if err := api.Call(ctx, apiclient.IssueToken, []string{tid, c.ID}, nil, map[string]string{}, &tok); err != nil {
				return "", "", fmt.Errorf("token: %w", err)
			}
			return tok.Username, tok.Password, nil
		}
	}
	var c apiclient.Credential
	body := map[string]any{"name": demoCredentialName, "acl": apiclient.ACL{Pub: []string{"demo/#"}, Sub: []string{"demo/#"}}}
	if err := api.Call(ctx, apiclient.CreateCredential, []string{tid}, nil, body, &c); err != nil {
		return "", "", fmt.Errorf("credential: %w", err)
	}
	return c.Username, c.Password, nil
}
