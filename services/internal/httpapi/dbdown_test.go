package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A database that does not answer is 503 database-unavailable; a query
// the database refused is not.
func TestDatabaseUnreachableIs503(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, dialErr := pgx.Connect(ctx, "postgres://postgres@"+addr+"/x?sslmode=disable&connect_timeout=2")
	if dialErr == nil {
		t.Fatal("connected to a closed port")
	}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"refused dial", fmt.Errorf("store: get tenant: %w", dialErr), http.StatusServiceUnavailable},
		{"server shutting down", &pgconn.PgError{Code: "57P01"}, http.StatusServiceUnavailable},
		{"connection exception", &pgconn.PgError{Code: "08006"}, http.StatusServiceUnavailable},
		{"constraint violated", &pgconn.PgError{Code: "23503"}, http.StatusInternalServerError},
		{"a bug", errors.New("nil map"), http.StatusInternalServerError},
	} {
		if got := problemFor(tc.err).Status; got != tc.want {
			t.Errorf("%s (%v): %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}
