package store

import (
	"context"
	"time"
)

// Session is a dashboard login.
type Session struct {
	ID               string
	AccountID        string
	ExpiresAt        time.Time
	RefreshExpiresAt time.Time
}

// CreateSession stores a session under the hashes of its two tokens. It
// also removes the account's sessions whose refresh token has expired.
func (s *Store) CreateSession(ctx context.Context, ses Session, tokenHash, refreshHash []byte) error {
	if _, err := s.pool.Exec(ctx,
		`DELETE FROM sessions WHERE account_id = $1 AND refresh_expires_at <= now()`, ses.AccountID); err != nil {
		return classify("prune sessions", err)
	}
	_, err := s.pool.Exec(ctx,
		`INSERT INTO sessions (id, account_id, token_hash, refresh_hash, expires_at, refresh_expires_at)
		 VALUES ($1, $2, $3, $4, $5, $6)`,
		ses.ID, ses.AccountID, tokenHash, refreshHash, ses.ExpiresAt, ses.RefreshExpiresAt)
	return classify("create session", err)
}

// SessionByToken returns the unexpired session whose token hashes to hash.
func (s *Store) SessionByToken(ctx context.Context, hash []byte) (Session, error) {
	var ses Session
	err := s.pool.QueryRow(ctx,
		`SELECT id, account_id, expires_at, refresh_expires_at FROM sessions
		 WHERE token_hash = $1 AND expires_at > now()`, hash).
		Scan(&ses.ID, &ses.AccountID, &ses.ExpiresAt, &ses.RefreshExpiresAt)
	return ses, classify("session by token", err)
}

// RefreshSession replaces both tokens of the session whose unexpired refresh
// token hashes to refreshHash; the old tokens stop working at once.
func (s *Store) RefreshSession(ctx context.Context, refreshHash, newTokenHash, newRefreshHash []byte, expires, refreshExpires time.Time) (Session, error) {
	ses := Session{ExpiresAt: expires, RefreshExpiresAt: refreshExpires}
	err := s.pool.QueryRow(ctx,
		`UPDATE sessions SET token_hash = $2, refresh_hash = $3, expires_at = $4, refresh_expires_at = $5
		 WHERE refresh_hash = $1 AND refresh_expires_at > now()
		 RETURNING id, account_id`,
		refreshHash, newTokenHash, newRefreshHash, expires, refreshExpires).Scan(&ses.ID, &ses.AccountID)
	return ses, classify("refresh session", err)
}

// DeleteSession ends a session.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, id)
	return classify("delete session", err)
}

// ExpireSession moves a session's expiry into the past (tests and forced
// logouts use it).
func (s *Store) ExpireSession(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE sessions SET expires_at = now() - interval '1 second' WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return classify("expire session", err)
}
