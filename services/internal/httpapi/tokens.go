package httpapi

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"time"

	"berth.dev/services/internal/credential"
	"berth.dev/services/internal/store"
)

var (
	// errCredentialExpired refuses a fresh token for a credential whose own
	// expiry has passed (409).
	errCredentialExpired = errors.New("httpapi: credential expired")
	// errInspectorCredential refuses a token for an inspector credential
	// other than through POST .../inspector-token, which bounds its life (409).
	errInspectorCredential = errors.New("httpapi: inspector credential")
)

type issueTokenRequest struct {
	ExpiresAt *string `json:"expires_at"` // RFC 3339; parsed here to name the field on error
}

type issuedTokenJSON struct {
	Username  string     `json:"username"`
	Password  string     `json:"password"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// issueToken signs a fresh token for an existing credential: the claims it
// was created with (sub, tid, acl, iss) with a new iat and jti, and exp =
// the requested expires_at, else the credential's own expiry, else none.
// A device sends it as the password of a new CONNECT, or in an MQTT 5
// re-authentication (AUTH 0x19, method berth-jwt) to move the deadline of
// the connection it holds. A revoked or expired credential gets none (409).
func (a *api) issueToken(w http.ResponseWriter, r *http.Request) error {
	var req issueTokenRequest
	if err := decodeOptionalJSON(w, r, &req); err != nil {
		return err
	}
	t := tenantFrom(r.Context())
	c, err := a.store.GetCredential(r.Context(), t.ID, urlParam(r, "cid"))
	if err != nil {
		return err
	}
	now := time.Now()
	switch {
	case c.Kind == store.KindInspector:
		return errInspectorCredential
	case c.RevokedAt != nil:
		return store.ErrRevoked
	case c.ExpiresAt != nil && !c.ExpiresAt.After(now):
		return errCredentialExpired
	}
	expires := c.ExpiresAt
	if req.ExpiresAt != nil {
		var v validator
		e, err := time.Parse(time.RFC3339, *req.ExpiresAt)
		e = e.UTC().Truncate(time.Second)
		switch {
		case err != nil:
			v.add("expires_at", "must be an RFC 3339 time like 2030-01-02T15:04:05Z")
		case !e.After(now):
			v.add("expires_at", "must be in the future")
		case c.ExpiresAt != nil && e.After(*c.ExpiresAt):
			v.add("expires_at", "must not be after the credential's own expiry, "+c.ExpiresAt.UTC().Format(time.RFC3339))
		case !e.Before(now.AddDate(10, 0, 0)):
			v.add("expires_at", "must be within 10 years")
		default:
			expires = &e
		}
		if err := v.err(); err != nil {
			return err
		}
	}
	claims := credential.Claims{
		Issuer: a.opts.Issuer, Subject: c.ID, TenantID: t.ID, IssuedAt: now.Unix(),
		JTI: credential.NewJTI(), ACL: c.ACL,
	}
	if expires != nil {
		claims.Expires = expires.Unix()
	}
	token, kid, err := a.keyring.Sign(r.Context(), claims)
	if err != nil {
		return err
	}
	// Refuses the token when a revocation committed since the read above.
	if err := a.store.RecordCredentialToken(r.Context(), t.ID, c.ID, kid); err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, issuedTokenJSON{Username: c.ID, Password: token, ExpiresAt: expires})
}

// decodeOptionalJSON is decodeJSON for a body that may be left out: an
// empty body leaves dst as it is.
func decodeOptionalJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	br := bufio.NewReader(r.Body)
	if _, err := br.Peek(1); errors.Is(err, io.EOF) {
		return nil
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{br, r.Body}
	return decodeJSON(w, r, dst)
}
