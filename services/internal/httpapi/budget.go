package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"time"

	"berth.dev/services/internal/store"
)

// A budget caps an account's monthly spend (docs/billing.md, "Budgets"):
// the billing worker compares the month's draft invoice with it at every
// run, records 80 % and 100 % once a month, and at 100 % with action
// "cap" caps the account's tenants' quotas to the free plan's bounds.

type budgetJSON struct {
	store.Budget
	Notices []store.BudgetNotice `json:"notices"`
}

// maxBudgetCents bounds a budget: $10,000,000.00.
const maxBudgetCents = 1_000_000_000

func (a *api) putBudget(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		MonthlyCents *int64  `json:"monthly_cents"`
		Action       *string `json:"action"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	v.check(req.MonthlyCents != nil && *req.MonthlyCents >= 1 && *req.MonthlyCents <= maxBudgetCents, "monthly_cents",
		"required: a whole number of cents from 1 to 1000000000")
	v.check(req.Action != nil && (*req.Action == "notify" || *req.Action == "cap"), "action", "required: notify or cap")
	if err := v.err(); err != nil {
		return err
	}
	accountID := principalFrom(r.Context()).AccountID
	if _, err := a.store.SetBudget(r.Context(), accountID, store.Budget{MonthlyCents: *req.MonthlyCents, Action: *req.Action}); err != nil {
		return err
	}
	return a.writeBudget(w, r, accountID)
}

func (a *api) getBudget(w http.ResponseWriter, r *http.Request) error {
	return a.writeBudget(w, r, principalFrom(r.Context()).AccountID)
}

// deleteBudget removes the budget: the worker checks nothing more; quotas
// already capped stay capped (the account raises them).
func (a *api) deleteBudget(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.DeleteBudget(r.Context(), principalFrom(r.Context()).AccountID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) writeBudget(w http.ResponseWriter, r *http.Request, accountID string) error {
	b, ns, err := a.store.GetBudget(r.Context(), accountID)
	if err != nil {
		return err
	}
	if ns == nil {
		ns = []store.BudgetNotice{}
	}
	return writeJSON(w, http.StatusOK, budgetJSON{Budget: b, Notices: ns})
}

// A budget webhook (docs/billing.md, "Budget webhooks") is where the
// billing worker POSTs the account's budget notices, signed with the
// webhook's secret (Berth-Signature: t=…,v1=HMAC-SHA256 of "t.body").

// budgetWebhookJSON is a webhook as the API answers it. The signing
// secret is only in the answer to the PUT that made it (the first, or a
// rotation); otherwise its last 4 characters tell which one is in use.
type budgetWebhookJSON struct {
	URL         string                 `json:"url"`
	Secret      string                 `json:"secret,omitempty"`
	SecretSet   bool                   `json:"secret_set"`
	SecretLast4 string                 `json:"secret_last4"`
	CreatedAt   time.Time              `json:"created_at"`
	UpdatedAt   time.Time              `json:"updated_at"`
	Deliveries  []store.BudgetDelivery `json:"deliveries"`
}

// maxWebhookURL bounds a webhook URL's length.
const maxWebhookURL = 2048

// newWebhookSecret returns a signing secret: whsec_ and 32 random bytes in hex.
func newWebhookSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "whsec_" + hex.EncodeToString(b[:])
}

// checkWebhookURL accepts an absolute http(s) URL with a host and without
// credentials or a fragment.
func checkWebhookURL(v *validator, raw string) {
	u, err := url.Parse(raw)
	v.check(raw != "" && len(raw) <= maxWebhookURL && err == nil && (u.Scheme == "https" || u.Scheme == "http") &&
		u.Host != "" && u.User == nil && u.Fragment == "", "url",
		"required: an absolute http or https URL with a host, no credentials and no fragment, at most 2048 characters")
}

// putBudgetWebhook sets the URL; the first time, or with rotate_secret,
// it makes a new signing secret. It answers the webhook, with its secret
// when this PUT made it.
func (a *api) putBudgetWebhook(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		URL          string `json:"url"`
		RotateSecret bool   `json:"rotate_secret"`
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	var v validator
	checkWebhookURL(&v, req.URL)
	if err := v.err(); err != nil {
		return err
	}
	accountID := principalFrom(r.Context()).AccountID
	secret := newWebhookSecret()
	h, err := a.store.SetBudgetWebhook(r.Context(), accountID, req.URL, secret, req.RotateSecret)
	if err != nil {
		return err
	}
	return a.writeBudgetWebhook(w, r, accountID, h.Secret == secret)
}

func (a *api) getBudgetWebhook(w http.ResponseWriter, r *http.Request) error {
	return a.writeBudgetWebhook(w, r, principalFrom(r.Context()).AccountID, false)
}

// writeBudgetWebhook answers accountID's webhook, its secret only when
// withSecret.
func (a *api) writeBudgetWebhook(w http.ResponseWriter, r *http.Request, accountID string, withSecret bool) error {
	h, ds, err := a.store.GetBudgetWebhook(r.Context(), accountID)
	if err != nil {
		return err
	}
	if ds == nil {
		ds = []store.BudgetDelivery{}
	}
	out := budgetWebhookJSON{URL: h.URL, SecretSet: h.Secret != "", SecretLast4: h.Secret[max(len(h.Secret)-4, 0):],
		CreatedAt: h.CreatedAt, UpdatedAt: h.UpdatedAt, Deliveries: ds}
	if withSecret {
		out.Secret = h.Secret
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *api) deleteBudgetWebhook(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.DeleteBudgetWebhook(r.Context(), principalFrom(r.Context()).AccountID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
