package httpapi

import (
	"errors"
	"net/http"
	"time"

	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/store"
)

const (
	// inspectorTTL is the life of an inspector token; DESIGN.md bounds it
	// at 15 minutes. The dashboard mints a new one before it runs out.
	inspectorTTL = 10 * time.Minute
	// inspectorClientIDPrefix is what the dashboard's client ids start
	// with, so they do not take over a device's session by accident and
	// the Clients page can tell them apart. It is advice, not enforced.
	inspectorClientIDPrefix = "berth-inspector-"
)

type inspectorTokenRequest struct {
	Publish bool `json:"publish"`
}

type inspectorTokenJSON struct {
	Username       string    `json:"username"`
	Password       string    `json:"password"`
	ClientIDPrefix string    `json:"client_id_prefix"`
	ExpiresAt      time.Time `json:"expires_at"`
	ACL            store.ACL `json:"acl"`
	WSURL          *string   `json:"ws_url"`
}

// inspectorToken mints a short-lived MQTT credential token for the
// dashboard's in-browser MQTT client: subscribe to everything in the
// tenant, publish nothing unless the body asks {"publish": true}, exp in
// inspectorTTL. It is an ordinary credential token (sub = the tenant's
// inspector credential, which every mint reuses), so the gateway and node
// take it like a device's and revoking the credential closes its
// connections. An API key may mint one too: the tenant is the account's.
func (a *api) inspectorToken(w http.ResponseWriter, r *http.Request) error {
	var req inspectorTokenRequest
	if err := decodeOptionalJSON(w, r, &req); err != nil {
		return err
	}
	ctx := r.Context()
	t := tenantFrom(ctx)
	acl := store.ACL{Pub: []string{}, Sub: []string{"#"}}
	if req.Publish {
		acl.Pub = []string{"#"}
	}
	// A revocation between reading the credential and recording the token
	// refuses the token; the next round makes a new credential.
	for attempt := 1; ; attempt++ {
		c, err := a.store.InspectorCredential(ctx, t.ID, store.NewID(store.PrefixCredential), acl)
		if err != nil {
			return err
		}
		now := time.Now()
		exp := now.Add(inspectorTTL).Truncate(time.Second)
		token, kid, err := a.keyring.Sign(ctx, credential.Claims{
			Issuer: a.opts.Issuer, Subject: c.ID, TenantID: t.ID, IssuedAt: now.Unix(), Expires: exp.Unix(),
			JTI: credential.NewJTI(), ACL: acl,
		})
		if err != nil {
			return err
		}
		err = a.store.RecordInspectorToken(ctx, t.ID, c.ID, kid, acl, exp)
		if errors.Is(err, store.ErrRevoked) && attempt < 3 {
			continue
		}
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusCreated, inspectorTokenJSON{
			Username: c.ID, Password: token, ClientIDPrefix: inspectorClientIDPrefix,
			ExpiresAt: exp.UTC(), ACL: acl, WSURL: a.browserWSURL(t.Slug),
		})
	}
}

// browserWSURL is the gateway's WebSocket URL for browsers: the secure one
// when there is one (a page served over HTTPS may open no other), else the
// plain one, else nil.
func (a *api) browserWSURL(slug string) *string {
	for _, u := range []string{a.opts.MQTTWSSURL, a.opts.MQTTWSURL} {
		if u != "" {
			u = forTenant(u, slug)
			return &u
		}
	}
	return nil
}
