package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Defaults of the per-account write rate (Options.AccountWriteRate and
// AccountWriteBurst; cmd/api's -account-write-rate and
// -account-write-burst): far above what a person at the dashboard or a
// provisioning script that honours Retry-After does, far below what
// would keep Postgres and the nodes' quota listeners busy.
const (
	defaultAccountWriteRate  = 20 // writes a second
	defaultAccountWriteBurst = 40
	// writeLimiterKeys bounds the accounts with a bucket in memory (those
	// that wrote within the last burst/rate seconds); beyond it the least
	// recently used bucket is dropped.
	writeLimiterKeys = 100_000
)

// writeRateError is an account over its write rate (429).
type writeRateError struct {
	retryAfter time.Duration
	rate       float64
	burst      int
}

func (e *writeRateError) Error() string {
	return fmt.Sprintf("httpapi: the account's writes are over %g a second (burst %d)", e.rate, e.burst)
}

// retryAfterSeconds is the Retry-After header's value: whole seconds,
// rounded up, at least 1.
func (e *writeRateError) retryAfterSeconds() string {
	return strconv.FormatInt(max(1, int64(math.Ceil(e.retryAfter.Seconds()))), 10)
}

// limitWrites holds every account to its write rate: one token bucket per
// account, shared by all its API keys and dashboard sessions, taken by
// each POST, PUT, PATCH and DELETE (refused ones too). Reads pass. It runs
// after authenticate. The buckets live in this process: with several API
// replicas each enforces its own.
func (a *api) limitWrites(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
			if ok, retry := a.writes.Allow(principalFrom(r.Context()).AccountID); !ok {
				writeProblem(w, r, &writeRateError{retryAfter: retry, rate: a.opts.AccountWriteRate, burst: a.opts.AccountWriteBurst})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
