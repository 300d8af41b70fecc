package jwtauth

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Key lookup errors.
var (
	ErrUnknownKey      = errors.New("jwtauth: unknown key id")
	ErrKeysUnavailable = errors.New("jwtauth: key set unavailable")
)

// maxJWKSBytes bounds the JWKS document.
const maxJWKSBytes = 1 << 20

// KeySetOptions configures a KeySet; zero values take the defaults.
type KeySetOptions struct {
	URL          string        // the JWKS URL, e.g. http://api:8080/v1/.well-known/jwks.json
	Client       *http.Client  // http.Client with a 5 s timeout
	MinRefresh   time.Duration // least time between two fetches triggered by unknown kids; 1 s
	RefreshEvery time.Duration // periodic refresh; 5 min
	Logger       *slog.Logger  // slog.New(slog.DiscardHandler)
	Now          func() time.Time
}

// KeySet is the API's signing keys by kid. Use NewKeySet, then Start to keep
// it fresh, and Shutdown to stop.
type KeySet struct {
	opt KeySetOptions

	mu        sync.RWMutex
	keys      map[string]ed25519.PublicKey
	lastFetch time.Time // last fetch attempt
	loaded    bool      // a fetch has succeeded at least once

	fetchMu sync.Mutex // one fetch at a time

	started atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// NewKeySet returns an empty KeySet; the first Key call or Start fetches.
func NewKeySet(opt KeySetOptions) *KeySet {
	if opt.Client == nil {
		opt.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if opt.MinRefresh <= 0 {
		opt.MinRefresh = time.Second
	}
	if opt.RefreshEvery <= 0 {
		opt.RefreshEvery = 5 * time.Minute
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &KeySet{opt: opt, keys: map[string]ed25519.PublicKey{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// Start fetches the keys once (a failure is logged, not fatal: the caller
// still starts and refuses tokens with "server unavailable" until the API
// answers) and refreshes them every RefreshEvery until Shutdown.
func (k *KeySet) Start(ctx context.Context) {
	if k.started.Swap(true) {
		return
	}
	if err := k.Refresh(ctx); err != nil {
		k.opt.Logger.Warn("jwks fetch failed", "url", k.opt.URL, "err", err)
	}
	go func() {
		defer close(k.done)
		t := time.NewTicker(k.opt.RefreshEvery)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := k.Refresh(ctx); err != nil {
					k.opt.Logger.Warn("jwks refresh failed", "url", k.opt.URL, "err", err)
				}
			}
		}
	}()
}

// Shutdown stops the periodic refresh started by Start and waits for it.
func (k *KeySet) Shutdown(ctx context.Context) error {
	k.once.Do(func() { close(k.stop) })
	if !k.started.Load() {
		return nil
	}
	select {
	case <-k.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Refresh fetches the JWKS now and replaces the keys with it. Keys that the
// API no longer publishes stop verifying.
func (k *KeySet) Refresh(ctx context.Context) error {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	return k.fetchLocked(ctx)
}

// fetchLocked expects fetchMu to be held.
func (k *KeySet) fetchLocked(ctx context.Context) error {
	k.mu.Lock()
	k.lastFetch = k.opt.Now()
	k.mu.Unlock()
	keys, err := k.fetch(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
	}
	k.mu.Lock()
	k.keys = keys
	k.loaded = true
	k.mu.Unlock()
	return nil
}

func (k *KeySet) fetch(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.opt.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.opt.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", k.opt.URL, resp.StatusCode)
	}
	var doc struct {
		Keys []struct {
			Kty string `json:"kty"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Kid string `json:"kid"`
			Alg string `json:"alg"`
			Use string `json:"use"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJWKSBytes)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("decode JWKS: %w", err)
	}
	keys := make(map[string]ed25519.PublicKey, len(doc.Keys))
	for _, jk := range doc.Keys {
		if jk.Kty != "OKP" || jk.Crv != "Ed25519" || jk.Kid == "" ||
			(jk.Alg != "" && jk.Alg != "EdDSA") || (jk.Use != "" && jk.Use != "sig") {
			continue // not a key we may verify EdDSA tokens with
		}
		x, err := base64.RawURLEncoding.DecodeString(jk.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			k.opt.Logger.Warn("jwks: skipping malformed key", "kid", jk.Kid)
			continue
		}
		keys[jk.Kid] = ed25519.PublicKey(x)
	}
	return keys, nil
}

// Key returns the public key for kid. An unknown kid triggers a fetch
// unless one happened within MinRefresh; it returns ErrUnknownKey if the
// kid is still unknown, ErrKeysUnavailable when no key set could ever be
// loaded.
func (k *KeySet) Key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	if key, ok, _ := k.lookup(kid); ok {
		return key, nil
	}
	arrived := k.opt.Now()
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	// Someone else may have fetched while we waited.
	key, ok, last := k.lookup(kid)
	if ok {
		return key, nil
	}
	var ferr error
	// A fetch that finished after this miss arrived already answered it, so
	// concurrent misses share one fetch. Otherwise fetch, but no sooner than
	// MinRefresh after the last one: wait out the rest rather than refuse,
	// so a key the API just published is never turned away, while a client
	// spraying random kids still causes at most one fetch per MinRefresh.
	if last.Before(arrived) {
		if wait := k.opt.MinRefresh - k.opt.Now().Sub(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		ferr = k.fetchLocked(ctx)
		if key, ok, _ = k.lookup(kid); ok {
			return key, nil
		}
	}
	k.mu.RLock()
	loaded := k.loaded
	k.mu.RUnlock()
	if !loaded {
		if ferr != nil {
			return nil, ferr
		}
		return nil, ErrKeysUnavailable
	}
	return nil, ErrUnknownKey
}

func (k *KeySet) lookup(kid string) (ed25519.PublicKey, bool, time.Time) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	key, ok := k.keys[kid]
	return key, ok, k.lastFetch
}
