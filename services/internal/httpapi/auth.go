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

// signupAccepted is signup's one answer, the same whether or not the email
// already has an account, so signup does not tell which emails do.
type signupAccepted struct {
	Status string `json:"status"`
	Detail string `json:"detail"`
}

var signupAnswer = signupAccepted{
	Status: "accepted",
	Detail: "If this email can be registered, its account and first tenant now exist: log in with the same email and password.",
}

// signup creates an account and its first tenant on the free plan. It
// answers 202 with signupAnswer whether the account was created or the
// email already had one (then nothing changes): the same status, body and
// work (an argon2id hash, the same inserts, rolled back), so neither the
// answer nor its time reveals that an email is registered. The client
// logs in next (POST /v1/login); for a taken email with another password
// that fails like any wrong password. Refusals that do not depend on the
// email (invalid input, a taken tenant_slug, busy) are problems as before.
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
	su := &store.Signup{
		Account: store.Account{
			ID: store.NewID(store.PrefixAccount), Email: req.Email,
			PasswordHash: pwHash,
		},
		Tenant: store.Tenant{ID: store.NewID(store.PrefixTenant), Slug: req.TenantSlug, Plan: free.Name},
		Quotas: free.Defaults,
	}
	err = a.store.CreateSignup(r.Context(), su)
	var conflict *store.ConflictError
	switch {
	case errors.Is(err, store.ErrEmailTaken):
		// The same answer as a new account: see above.
	case errors.As(err, &conflict) && conflict.Field == "slug":
		return &store.ConflictError{Field: "tenant_slug"}
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusAccepted, signupAnswer)
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
	// Plans are the plans the account may put tenants on, and TenantLimit
	// how many tenants it may have: the dashboard offers only these.
	Plans       []string `json:"plans"`
	TenantLimit int      `json:"tenant_limit"`
	// Payment is the account's payment state (docs/billing.md, "Payment").
	Payment paymentJSON `json:"payment"`
}

type paymentJSON struct {
	// Enabled: the service takes payment (it runs with a Stripe key).
	Enabled bool `json:"enabled"`
	store.Payment
}

// getAccount answers who the caller is and what it is entitled to: the
// dashboard's Settings page and its new-tenant dialog show it.
func (a *api) getAccount(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	acc, err := a.store.AccountByID(ctx, principalFrom(ctx).AccountID)
	if err != nil {
		return err
	}
	plans, err := a.entitledPlans(ctx, acc.ID)
	if err != nil {
		return err
	}
	limit, err := plan.TenantCap(plans)
	if err != nil {
		return err
	}
	pay, err := a.store.AccountPayment(ctx, acc.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, accountJSON{ID: acc.ID, Email: acc.Email, CreatedAt: acc.CreatedAt,
		Plans: plans, TenantLimit: limit, Payment: paymentJSON{Enabled: a.opts.Payments != nil, Payment: pay}})
}
