package httpapi

import (
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// databaseUnavailable reports whether err says that Postgres could not be
// reached or went away mid-request (restart, failover, network), as
// opposed to a query it refused: the API answers those 503
// database-unavailable with Retry-After, never 500, so that clients retry
// and monitors page for the database rather than for a bug.
func databaseUnavailable(err error) bool {
	var (
		connErr *pgconn.ConnectError
		pgErr   *pgconn.PgError
		netErr  net.Error
	)
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr), pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-57P03: the server is
		// shutting down, crashed, or not accepting connections yet.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	return false
}
