package account

import (
	"context"
	"errors"
	"strings"
	"time"

	"berth.dev/services/internal/store"
)

var (
	// ErrBadCredentials is returned by Login for an unknown email or a wrong
	// password (deliberately the same error).
	ErrBadCredentials = errors.New("account: wrong email or password")
	// ErrUnauthenticated is returned for a missing, unknown, expired or
	// revoked bearer token.
	ErrUnauthenticated = errors.New("account: not authenticated")
)

// Service logs accounts in and authenticates bearer tokens.
type Service struct {
	store      *store.Store
	params     Params
	sessionTTL time.Duration
	refreshTTL time.Duration
	dummyHash  string
	hashes     *HashLimiter
}

// NewService returns a Service issuing sessions that last sessionTTL and
// can be refreshed for refreshTTL. Its password hashes run under hashes
// (nil: DefaultHashConcurrency at once, waiting DefaultHashWait).
func NewService(st *store.Store, p Params, sessionTTL, refreshTTL time.Duration, hashes *HashLimiter) *Service {
	if hashes == nil {
		hashes = NewHashLimiter(DefaultHashConcurrency(), DefaultHashWait)
	}
	return &Service{
		store: st, params: p, sessionTTL: sessionTTL, refreshTTL: refreshTTL,
		dummyHash: HashPassword("berth-dummy-password", p), hashes: hashes,
	}
}

// HashPassword returns the argon2id PHC string of password, waiting for a
// slot of the hash limiter (ErrBusy when none frees in time).
func (s *Service) HashPassword(ctx context.Context, password string) (string, error) {
	var h string
	err := s.hashes.Do(ctx, func() { h = HashPassword(password, s.params) })
	return h, err
}

// verifyPassword is VerifyPassword under the hash limiter.
func (s *Service) verifyPassword(ctx context.Context, encoded, password string) (ok bool, err error) {
	if lerr := s.hashes.Do(ctx, func() { ok, err = VerifyPassword(encoded, password) }); lerr != nil {
		return false, lerr
	}
	return ok, err
}

// Params returns the password hashing parameters in use.
func (s *Service) Params() Params { return s.params }

// Tokens are a new session's secrets, shown once.
type Tokens struct {
	Session          store.Session
	Token            string
	RefreshToken     string
	ExpiresAt        time.Time
	RefreshExpiresAt time.Time
}

// Login checks an email and password and starts a session.
func (s *Service) Login(ctx context.Context, email, password string) (Tokens, error) {
	acc, err := s.store.AccountByEmail(ctx, email)
	if errors.Is(err, store.ErrNotFound) {
		// Spend the same time as a real check, so timing does not reveal
		// which emails have accounts.
		if _, err := s.verifyPassword(ctx, s.dummyHash, password); errors.Is(err, ErrBusy) || errors.Is(err, context.Canceled) {
			return Tokens{}, err
		}
		return Tokens{}, ErrBadCredentials
	}
	if err != nil {
		return Tokens{}, err
	}
	ok, err := s.verifyPassword(ctx, acc.PasswordHash, password)
	if err != nil {
		return Tokens{}, err
	}
	if !ok {
		return Tokens{}, ErrBadCredentials
	}
	return s.NewSession(ctx, acc.ID)
}

// NewSession starts a session for an account.
func (s *Service) NewSession(ctx context.Context, accountID string) (Tokens, error) {
	token, tokenHash := NewSecret(PrefixSession)
	refresh, refreshHash := NewSecret(PrefixRefresh)
	now := time.Now()
	ses := store.Session{
		ID: store.NewID(store.PrefixSession), AccountID: accountID,
		ExpiresAt: now.Add(s.sessionTTL), RefreshExpiresAt: now.Add(s.refreshTTL),
	}
	if err := s.store.CreateSession(ctx, ses, tokenHash, refreshHash); err != nil {
		return Tokens{}, err
	}
	return Tokens{Session: ses, Token: token, RefreshToken: refresh, ExpiresAt: ses.ExpiresAt, RefreshExpiresAt: ses.RefreshExpiresAt}, nil
}

// Refresh trades a refresh token for new session and refresh tokens.
func (s *Service) Refresh(ctx context.Context, refresh string) (Tokens, error) {
	if !strings.HasPrefix(refresh, PrefixRefresh) {
		return Tokens{}, ErrUnauthenticated
	}
	token, tokenHash := NewSecret(PrefixSession)
	newRefresh, refreshHash := NewSecret(PrefixRefresh)
	now := time.Now()
	ses, err := s.store.RefreshSession(ctx, HashSecret(refresh), tokenHash, refreshHash, now.Add(s.sessionTTL), now.Add(s.refreshTTL))
	if errors.Is(err, store.ErrNotFound) {
		return Tokens{}, ErrUnauthenticated
	}
	if err != nil {
		return Tokens{}, err
	}
	return Tokens{Session: ses, Token: token, RefreshToken: newRefresh, ExpiresAt: ses.ExpiresAt, RefreshExpiresAt: ses.RefreshExpiresAt}, nil
}

// Principal is an authenticated caller: an account, through either a
// session or an API key.
type Principal struct {
	AccountID string
	SessionID string // set for a session
	APIKeyID  string // set for an API key
}

// Authenticate resolves a bearer token (session token or API key).
func (s *Service) Authenticate(ctx context.Context, token string) (Principal, error) {
	switch {
	case strings.HasPrefix(token, PrefixSession):
		ses, err := s.store.SessionByToken(ctx, HashSecret(token))
		if errors.Is(err, store.ErrNotFound) {
			return Principal{}, ErrUnauthenticated
		}
		if err != nil {
			return Principal{}, err
		}
		return Principal{AccountID: ses.AccountID, SessionID: ses.ID}, nil
	case strings.HasPrefix(token, PrefixAPIKey):
		k, err := s.store.APIKeyByHash(ctx, HashSecret(token))
		if errors.Is(err, store.ErrNotFound) {
			return Principal{}, ErrUnauthenticated
		}
		if err != nil {
			return Principal{}, err
		}
		return Principal{AccountID: k.AccountID, APIKeyID: k.ID}, nil
	}
	return Principal{}, ErrUnauthenticated
}

// Logout ends a session.
func (s *Service) Logout(ctx context.Context, sessionID string) error {
	return s.store.DeleteSession(ctx, sessionID)
}
