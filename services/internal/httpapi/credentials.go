package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/store"
)

// ACL bounds.
const maxACLFilters = 100

type aclJSON struct {
	Pub []string `json:"pub"`
	Sub []string `json:"sub"`
}

type createCredentialRequest struct {
	Name      string   `json:"name"`
	ACL       *aclJSON `json:"acl"`
	ExpiresAt *string  `json:"expires_at"` // RFC 3339; parsed here to name the field on error
}

type credentialJSON struct {
	ID        string     `json:"id"`
	Kind      string     `json:"kind"`
	Name      string     `json:"name"`
	ACL       store.ACL  `json:"acl"`
	ExpiresAt *time.Time `json:"expires_at"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	KID       string     `json:"kid,omitempty"`
}

type createdCredentialJSON struct {
	credentialJSON
	Username string `json:"username"`
	Password string `json:"password"`
	Endpoint string `json:"endpoint"`
	MQTTAddr string `json:"mqtt_addr"`
}

func credentialOut(c store.Credential) credentialJSON {
	return credentialJSON{ID: c.ID, Kind: c.Kind, Name: c.Name, ACL: c.ACL, ExpiresAt: c.ExpiresAt, CreatedAt: c.CreatedAt, RevokedAt: c.RevokedAt, KID: c.KID}
}

func checkFilters(v *validator, field string, filters []string) []string {
	if len(filters) > maxACLFilters {
		v.add(field, fmt.Sprintf("must hold at most %d filters", maxACLFilters))
	}
	for i, f := range filters {
		checkTopicFilter(v, fmt.Sprintf("%s[%d]", field, i), f)
	}
	if filters == nil {
		return []string{}
	}
	return filters
}

// createCredential issues a device credential: username = its id, password
// = a signed token, both shown once.
func (a *api) createCredential(w http.ResponseWriter, r *http.Request) error {
	var req createCredentialRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	now := time.Now()
	var v validator
	checkName(&v, "name", req.Name, true)
	if req.ACL == nil {
		v.add("acl", `is required: {"pub":[filters],"sub":[filters]}`)
		req.ACL = &aclJSON{}
	}
	acl := store.ACL{Pub: checkFilters(&v, "acl.pub", req.ACL.Pub), Sub: checkFilters(&v, "acl.sub", req.ACL.Sub)}
	var expires *time.Time
	if req.ExpiresAt != nil {
		t, err := time.Parse(time.RFC3339, *req.ExpiresAt)
		switch {
		case err != nil:
			v.add("expires_at", "must be an RFC 3339 time like 2030-01-02T15:04:05Z")
		case !t.After(now.Add(time.Minute)):
			v.add("expires_at", "must be at least a minute in the future")
		case !t.Before(now.AddDate(10, 0, 0)):
			v.add("expires_at", "must be within 10 years")
		default:
			t = t.UTC().Truncate(time.Second)
			expires = &t
		}
	}
	if err := v.err(); err != nil {
		return err
	}
	t := tenantFrom(r.Context())
	c := store.Credential{ID: store.NewID(store.PrefixCredential), TenantID: t.ID, Name: req.Name, ACL: acl}
	claims := credential.Claims{
		Issuer: a.opts.Issuer, Subject: c.ID, TenantID: t.ID, IssuedAt: now.Unix(),
		JTI: credential.NewJTI(), ACL: acl,
	}
	if expires != nil {
		c.ExpiresAt = expires
		claims.Expires = expires.Unix()
	}
	token, kid, err := a.keyring.Sign(r.Context(), claims)
	if err != nil {
		return err
	}
	c.KID = kid
	if err := a.store.CreateCredential(r.Context(), &c); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/tenants/"+t.ID+"/credentials/"+c.ID)
	return writeJSON(w, http.StatusCreated, createdCredentialJSON{
		credentialJSON: credentialOut(c),
		Username:       c.ID, Password: token, Endpoint: a.endpoint(t.Slug), MQTTAddr: forTenant(a.opts.MQTTAddr, t.Slug),
	})
}

// listCredentials lists device credentials; ?kind=inspector lists the
// tenant's inspector credentials (the dashboard's, from POST
// .../inspector-token) instead, ?kind=all both.
func (a *api) listCredentials(w http.ResponseWriter, r *http.Request) error {
	p, err := parsePage(r)
	if err != nil {
		return err
	}
	kind := r.URL.Query().Get("kind")
	switch kind {
	case "":
		kind = store.KindDevice
	case store.KindDevice, store.KindInspector:
	case "all":
		kind = ""
	default:
		return invalid("kind", "must be device, inspector or all")
	}
	cs, next, err := a.store.ListCredentials(r.Context(), tenantFrom(r.Context()).ID, kind, p)
	if err != nil {
		return err
	}
	out := make([]credentialJSON, len(cs))
	for i, c := range cs {
		out[i] = credentialOut(c)
	}
	return writeJSON(w, http.StatusOK, newList(out, next))
}

func (a *api) getCredential(w http.ResponseWriter, r *http.Request) error {
	c, err := a.store.GetCredential(r.Context(), tenantFrom(r.Context()).ID, urlParam(r, "cid"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, credentialOut(c))
}

// revokeCredential revokes at once; gateways and nodes hear of it through
// NOTIFY berth_credentials and close the credential's connections.
func (a *api) revokeCredential(w http.ResponseWriter, r *http.Request) error {
	if err := a.store.RevokeCredential(r.Context(), tenantFrom(r.Context()).ID, urlParam(r, "cid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
