package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"berth.dev/services/apiclient"
)

func runSignup(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "signup", "--email EMAIL [--password PASSWORD | --password-stdin] [--tenant-slug SLUG]",
		"  berthctl signup --email me@example.com            (asks for the password twice, not echoed)\n  berthctl signup --email me@example.com --password 'correct horse battery'\n  pass show berth | berthctl signup --email me@example.com --password-stdin").withAPI()
	email := f.String("email", "", "account email (required)")
	pf := addPasswordFlags(f)
	slug := f.String("tenant-slug", "", "slug of the first tenant (default one derived from the email)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	if *email == "" {
		f.Usage()
		return usagef("signup: --email is required")
	}
	pw, err := pf.read(e, true)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(e)
	if err != nil {
		return err
	}
	api := apiclient.New(apiURL(e, *f.api, cfg), "")
	body := map[string]string{"email": *email, "password": pw}
	if *slug != "" {
		body["tenant_slug"] = *slug
	}
	if err := api.Call(ctx, apiclient.Signup, nil, nil, body, nil); err != nil {
		return fmt.Errorf("signup: %w", err)
	}
	// Signup answers alike for a new and a registered email; logging in tells.
	if err := login(ctx, e, cfg, api, *email, pw, ""); err != nil {
		var ae *apiclient.Error
		if errors.As(err, &ae) && ae.Status == 401 {
			return fmt.Errorf("signup accepted, but login failed (the email has an account with another password?): %w", err)
		}
		return err
	}
	return nil
}

func runLogin(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "login", "--email EMAIL [--password PASSWORD | --password-stdin] | --api-key KEY",
		"  berthctl login --email me@example.com            (asks for the password, not echoed)\n  berthctl login --email me@example.com --password-stdin < ~/.berth-password\n  BERTH_API_URL=https://api.example.com berthctl login --api-key bk_...").withAPI()
	email := f.String("email", "", "account email")
	pf := addPasswordFlags(f)
	key := f.String("api-key", "", "store this API key instead of logging in with a password")
	tenant := f.String("tenant", "", "tenant id or slug to use by default (default the account's first)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	if (*email == "") == (*key == "") {
		f.Usage()
		return usagef("login: give --email or --api-key")
	}
	cfg, err := loadConfig(e)
	if err != nil {
		return err
	}
	api := apiclient.New(apiURL(e, *f.api, cfg), "")
	if *key != "" {
		api.Token = *key
		var acct struct {
			Email string `json:"email"`
		}
		if err := api.Call(ctx, apiclient.GetAccount, nil, nil, nil, &acct); err != nil {
			return fmt.Errorf("login: %w", err)
		}
		cfg.API, cfg.Email, cfg.APIKey, cfg.APIKeyID = api.Base, acct.Email, *key, ""
		return chooseTenant(ctx, e, cfg, api, *tenant)
	}
	pw, err := pf.read(e, false)
	if err != nil {
		return err
	}
	return login(ctx, e, cfg, api, *email, pw, *tenant)
}

// login trades email and password for a session, makes an API key with it
// (sessions last minutes, a CLI is kept open all day), ends the session and
// stores the key, revoking the one stored before.
func login(ctx context.Context, e *env, cfg *config, api *apiclient.Client, email, pw, tenant string) error {
	var s apiclient.Session
	if err := api.Call(ctx, apiclient.Login, nil, nil, map[string]string{"email": email, "password": pw}, &s); err != nil {
		return fmt.Errorf("login: %w", err)
	}
	sess := apiclient.New(api.Base, s.Token)
	host, _ := os.Hostname()
	var k apiclient.APIKey
	if err := sess.Call(ctx, apiclient.CreateAPIKey, nil, nil, map[string]string{"name": "berthctl " + host}, &k); err != nil {
		return fmt.Errorf("login: API key: %w", err)
	}
	_ = sess.Call(ctx, apiclient.Logout, nil, nil, nil, nil)
	if cfg.APIKey != "" && cfg.APIKeyID != "" && cfg.API == api.Base {
		// The previous login's key; it may be another account's (then 401/404).
		_ = apiclient.New(api.Base, cfg.APIKey).Call(ctx, apiclient.DeleteAPIKey, []string{cfg.APIKeyID}, nil, nil, nil)
	}
	cfg.API, cfg.Email, cfg.APIKey, cfg.APIKeyID = api.Base, email, k.Secret, k.ID
	api.Token = k.Secret
	return chooseTenant(ctx, e, cfg, api, tenant)
}

// chooseTenant stores the default tenant and saves the config.
func chooseTenant(ctx context.Context, e *env, cfg *config, api *apiclient.Client, want string) error {
	cfg.Tenant = ""
	if err := cfg.save(e); err != nil {
		return err
	}
	s := &session{cfg: cfg, api: api}
	t, err := s.tenant(ctx, e, &flags{tenant: &want})
	if err != nil {
		return err
	}
	cfg.Tenant = t.ID
	if err := cfg.save(e); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Logged in to %s as %s; tenant %s (%s), MQTT at %s\n", api.Base, cfg.Email, t.Slug, t.ID, t.Endpoints.MQTT)
	if e.getenv("BERTH_API_KEY") != "" {
		fmt.Fprintln(e.stderr, "berthctl: note: BERTH_API_KEY is set (by . demo.env?) and overrides this login in later commands; unset BERTH_API_KEY to use it")
	}
	return nil
}

func runLogout(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "logout", "", "  berthctl logout").withAPI()
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	cfg, err := loadConfig(e)
	if err != nil {
		return err
	}
	if cfg.APIKey == "" {
		fmt.Fprintln(e.stdout, "Not logged in.")
		return nil
	}
	if cfg.APIKeyID != "" {
		err := apiclient.New(cfg.API, cfg.APIKey).Call(ctx, apiclient.DeleteAPIKey, []string{cfg.APIKeyID}, nil, nil, nil)
		var ae *apiclient.Error
		if err != nil && !(errors.As(err, &ae) && (ae.Status == 401 || ae.Status == 404)) {
			return fmt.Errorf("logout: revoke the API key: %w", err)
		}
	}
	cfg.Email, cfg.APIKey, cfg.APIKeyID, cfg.Tenant = "", "", "", ""
	if err := cfg.save(e); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "Logged out; the API key is revoked.")
	return nil
}
