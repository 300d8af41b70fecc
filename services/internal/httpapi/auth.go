package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"berth.dev/billing/plan"
	"berth.dev/services/internal/account"
	"berth.dev/services/internal/store"
)

type signupRequest struct {
	Email      string `json:"email"`
	Password   string `json:"password"`
	TenantSlug string `json:"tenant_slug,omitempty"`
}

type tenantRef struct {
	ID       string `json:"id"`
	Slug     string `json:"slug"`
	Endpoint string `json:"endpoint"`
}

type signupResponse struct {
	AccountID string    `json:"account_id"`
	APIKey    string    `json:"api_key"`
	Tenant    tenantRef `json:"tenant"`
}

// signup creates an account, its first API key (shown once) and its first
// tenant on the free plan.
func (a *api) signup(w http.ResponseWriter, r *http.Request) error {
	var req signupRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	req.Email = strings.TrimSpace(req.Email)
	checkEmail(&v, req.Email)
	checkPassword(&v, req.Password)
	if req.TenantSlug == "" {
		req.TenantSlug = randomSlug()
	} else {
		checkSlug(&v, "tenant_slug", req.TenantSlug)
	}
	if err := v.err(); err != nil {
		return err
	}
	free, err := plan.Lookup("free")
	if err != nil {
		return err
	}
	pwHash, err := a.accounts.HashPassword(r.Context(), req.Password)
	if err != nil {
		return err
	}
	secret, hash := account.NewSecret(account.PrefixAPIKey)
	su := &store.Signup{
		Account: store.Account{
			ID: store.NewID(store.PrefixAccount), Email: req.Email,
			PasswordHash: pwHash,
		},
		KeyID: store.NewID(store.PrefixAPIKey), KeyName: "signup", KeyHash: hash,
		Tenant: store.Tenant{ID: store.NewID(store.PrefixTenant), Slug: req.TenantSlug, Plan: free.Name},
		Quotas: free.Defaults,
	}
	if err := a.store.CreateSignup(r.Context(), su); err != nil {
		var conflict *store.ConflictError
		if errors.As(err, &conflict) && conflict.Field == "slug" {
			return &store.ConflictError{Field: "tenant_slug"}
		}
		return err
	}
	w.Header().Set("Location", "/v1/tenants/"+su.Tenant.ID)
	return writeJSON(w, http.StatusCreated, signupResponse{
		AccountID: su.Account.ID, APIKey: secret,
		Tenant: tenantRef{ID: su.Tenant.ID, Slug: su.Tenant.Slug, Endpoint: a.endpoint(su.Tenant.Slug)},
	})
}

// randomSlug names a first tenant the user did not name: "t-" and 12
// characters of the tenant-id alphabet.
func randomSlug() string {
	id := store.NewID("t")
	return strings.ReplaceAll(id[:14], "_", "-")
}

type loginRequest struct {
	Email    string `json:"email"`
	Password string `json:"password"`
}

type sessionResponse struct {
	AccountID        string    `json:"account_id"`
	Token            string    `json:"token"`
	ExpiresAt        time.Time `json:"expires_at"`
	RefreshToken     string    `json:"refresh_token"`
	RefreshExpiresAt time.Time `json:"refresh_expires_at"`
}

// login starts a dashboard session: the tokens in the body (for scripts)
// and in HttpOnly cookies (for the dashboard).
func (a *api) login(w http.ResponseWriter, r *http.Request) error {
	var req loginRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	v.check(req.Email != "", "email", "is required")
	v.check(req.Password != "", "password", "is required")
	v.check(len(req.Password) <= maxPassword, "password", "must be at most 256 bytes")
	if err := v.err(); err != nil {
		return err
	}
	t, err := a.accounts.Login(r.Context(), strings.TrimSpace(req.Email), req.Password)
	if err != nil {
		return err
	}
	return a.writeSession(w, http.StatusCreated, t)
}

type refreshRequest struct {
	RefreshToken string `json:"refresh_token"`
}

// refresh trades a refresh token (body or cookie) for new tokens.
func (a *api) refresh(w http.ResponseWriter, r *http.Request) error {
	var req refreshRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	if req.RefreshToken == "" {
		if c, err := r.Cookie(cookieRefresh); err == nil {
			req.RefreshToken = c.Value
		}
	}
	t, err := a.accounts.Refresh(r.Context(), req.RefreshToken)
	if err != nil {
		return err
	}
	return a.writeSession(w, http.StatusOK, t)
}

func (a *api) writeSession(w http.ResponseWriter, status int, t account.Tokens) error {
	http.SetCookie(w, &http.Cookie{
		Name: cookieSession, Value: t.Token, Path: "/", Expires: t.ExpiresAt,
		HttpOnly: true, Secure: a.opts.SecureCookies, SameSite: http.SameSiteStrictMode,
	})
	http.SetCookie(w, &http.Cookie{
		Name: cookieRefresh, Value: t.RefreshToken, Path: "/v1/refresh", Expires: t.RefreshExpiresAt,
		HttpOnly: true, Secure: a.opts.SecureCookies, SameSite: http.SameSiteStrictMode,
	})
	return writeJSON(w, status, sessionResponse{
		AccountID: t.Session.AccountID, Token: t.Token, ExpiresAt: t.ExpiresAt,
		RefreshToken: t.RefreshToken, RefreshExpiresAt: t.RefreshExpiresAt,
	})
}

// logout ends the caller's session and clears the cookies.
func (a *api) logout(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	if p.SessionID == "" {
		return errNeedSession
	}
	if err := a.accounts.Logout(r.Context(), p.SessionID); err != nil {
		return err
	}
	for _, c := range []struct{ name, path string }{{cookieSession, "/"}, {cookieRefresh, "/v1/refresh"}} {
		http.SetCookie(w, &http.Cookie{
			Name: c.name, Value: "", Path: c.path, MaxAge: -1,
			HttpOnly: true, Secure: a.opts.SecureCookies, SameSite: http.SameSiteStrictMode,
		})
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type apiKeyJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
	Secret     string     `json:"secret,omitempty"`
}

func apiKeyOut(k store.APIKey) apiKeyJSON {
	return apiKeyJSON{ID: k.ID, Name: k.Name, CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}
}

func (a *api) listAPIKeys(w http.ResponseWriter, r *http.Request) error {
	p, err := parsePage(r)
	if err != nil {
		return err
	}
	keys, next, err := a.store.ListAPIKeys(r.Context(), principalFrom(r.Context()).AccountID, p)
	if err != nil {
		return err
	}
	out := make([]apiKeyJSON, len(keys))
	for i, k := range keys {
		out[i] = apiKeyOut(k)
	}
	return writeJSON(w, http.StatusOK, newList(out, next))
}

type createAPIKeyRequest struct {
	Name string `json:"name"`
}

// createAPIKey returns the new key's secret, once.
func (a *api) createAPIKey(w http.ResponseWriter, r *http.Request) error {
	var req createAPIKeyRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	checkName(&v, "name", req.Name, false)
	if err := v.err(); err != nil {
		return err
	}
	secret, hash := account.NewSecret(account.PrefixAPIKey)
	k := store.APIKey{ID: store.NewID(store.PrefixAPIKey), AccountID: principalFrom(r.Context()).AccountID, Name: req.Name}
	if err := a.store.CreateAPIKey(r.Context(), &k, hash); err != nil {
		return err
	}
	out := apiKeyOut(k)
	out.Secret = secret
	w.Header().Set("Location", "/v1/api-keys/"+k.ID)
	return writeJSON(w, http.StatusCreated, out)
}

func (a *api) revokeAPIKey(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.RevokeAPIKey(r.Context(), principalFrom(r.Context()).AccountID, urlParam(r, "id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type accountJSON struct {
	ID        string    `json:"id"`
	Email     string    `json:"email"`
	CreatedAt time.Time `json:"created_at"`
}

// getAccount answers who the caller is: the dashboard's Settings page shows it.
func (a *api) getAccount(w http.ResponseWriter, r *http.Request) error {
	acc, err := a.store.AccountByID(r.Context(), principalFrom(r.Context()).AccountID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, accountJSON{ID: acc.ID, Email: acc.Email, CreatedAt: acc.CreatedAt})
}
