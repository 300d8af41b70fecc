package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"berth.dev/services/apiclient"
)

const defaultAPI = "http://127.0.0.1:8080"

// config is the file berthctl keeps between runs (mode 0600 in a 0700 dir).
type config struct {
	API      string `json:"api,omitempty"`
	Email    string `json:"email,omitempty"`
	APIKey   string `json:"api_key,omitempty"`    // secret, sent as Bearer
	APIKeyID string `json:"api_key_id,omitempty"` // to revoke it at logout
	Tenant   string `json:"tenant,omitempty"`     // tenant id chosen at login
	// Demo is what `berthctl demo` reuses between runs.
	Demo *demoState `json:"demo,omitempty"`
}

type demoState struct {
	API    string `json:"api"`
	Email  string `json:"email"`
	APIKey string `json:"api_key"`
}

// configPath is BERTH_CONFIG, else os.UserConfigDir()/berth/config.json
// ($XDG_CONFIG_HOME or ~/.config on Linux).
func configPath(e *env) (string, error) {
	if p := e.getenv("BERTH_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "berth", "config.json"), nil
}

func loadConfig(e *env) (*config, error) {
	p, err := configPath(e)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return &config{}, nil
	}
	if err != nil {
		return nil, err
	}
	var c config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("config %s: %w", p, err)
	}
	return &c, nil
}

// save writes c atomically with mode 0600 in a 0700 directory.
func (c *config) save(e *env) error {
	p, err := configPath(e)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".config-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// apiURL is --api, else BERTH_API_URL, else the config's, else the local stack.
func apiURL(e *env, flagVal string, c *config) string {
	switch {
	case flagVal != "":
		return strings.TrimRight(flagVal, "/")
	case e.getenv("BERTH_API_URL") != "":
		return strings.TrimRight(e.getenv("BERTH_API_URL"), "/")
	case c.API != "":
		return c.API
	}
	return defaultAPI
}

// session is a logged-in command's client and config.
type session struct {
	cfg *config
	api *apiclient.Client
}

// open returns the client for a command needing a login.
func open(e *env, f *flags) (*session, error) {
	c, err := loadConfig(e)
	if err != nil {
		return nil, err
	}
	key := e.getenv("BERTH_API_KEY")
	if key == "" {
		key = c.APIKey
	}
	if key == "" {
		return nil, errNotLoggedIn
	}
	api := ""
	if f.api != nil {
		api = *f.api
	}
	return &session{cfg: c, api: apiclient.New(apiURL(e, api, c), key)}, nil
}

// tenant resolves --tenant (id or slug), BERTH_TENANT, the config's choice,
// or the account's first tenant, to a tenant.
func (s *session) tenant(ctx context.Context, e *env, f *flags) (apiclient.Tenant, error) {
	want := ""
	if f.tenant != nil {
		want = *f.tenant
	}
	if want == "" {
		want = e.getenv("BERTH_TENANT")
	}
	if want == "" {
		want = s.cfg.Tenant
	}
	if strings.HasPrefix(want, "ten_") {
		var t apiclient.Tenant
		err := s.api.Call(ctx, apiclient.GetTenant, []string{want}, nil, nil, &t)
		return t, err
	}
	ts, err := allItems[apiclient.Tenant](ctx, s.api, apiclient.ListTenants, nil)
	if err != nil {
		return apiclient.Tenant{}, err
	}
	for _, t := range ts {
		if want == "" || t.Slug == want {
			return t, nil
		}
	}
	if want == "" {
		return apiclient.Tenant{}, &notFoundError{"tenant (the account has none; berthctl tenants create --slug S)"}
	}
	return apiclient.Tenant{}, &notFoundError{fmt.Sprintf("tenant %q", want)}
}
