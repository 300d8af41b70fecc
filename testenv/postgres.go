package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"berth.dev/migrations"
)

// DefaultDatabaseURL is the maintenance database of the dev stack's Postgres.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:54329/postgres?sslmode=disable"

// adminURL is the server-level URL tests create their databases through.
func adminURL() string {
	if u := os.Getenv("BERTH_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// DatabaseURL creates a fresh database holding the full Berth schema and
// returns its URL. The database is dropped when the test ends.
//
// Creation is a clone of a template database migrated once per schema
// version (named by a hash of the migration files), so it costs a file copy
// rather than a migration run.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	admin, err := pgx.Connect(ctx, adminURL())
	if err != nil {
		t.Fatalf("testenv: Postgres at %s is unreachable (%v); run `make test`, or `make dev-up` before `go test`", redact(adminURL()), err)
	}
	defer admin.Close(ctx)

	tmpl, err := ensureTemplate(ctx, admin)
	if err != nil {
		t.Fatalf("testenv: template database: %v", err)
	}
	name := "berth_test_" + randomHex(6)
	if err := createFromTemplate(ctx, admin, name, tmpl); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, adminURL())
		if err != nil {
			t.Logf("testenv: drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop %s: %v", name, err)
		}
	})
	return withDatabase(adminURL(), name)
}

// Postgres returns a pool on a fresh database (see DatabaseURL), closed when
// the test ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := DatabaseURL(t)
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ensureTemplate makes sure a migrated template for the current migration
// files exists and returns its name. Packages racing to create it serialize
// on an advisory lock.
func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	sum, err := schemaHash()
	if err != nil {
		return "", err
	}
	name := "berth_tmpl_" + sum
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(727274)"); err != nil {
		return "", err
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(727274)") //nolint:errcheck

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// A half-built template from a crashed run is not marked; start it over.
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", err
	}
	if err := migrations.Up(ctx, withDatabase(adminURL(), name)); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident+" WITH is_template true ALLOW_CONNECTIONS false"); err != nil {
		return "", err
	}
	return name, nil
}

// createFromTemplate clones tmpl. Postgres refuses a clone while another
// session copies the same template, so a busy template is retried briefly.
func createFromTemplate(ctx context.Context, admin *pgx.Conn, name, tmpl string) error {
	q := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize()
	for {
		_, err := admin.Exec(ctx, q)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// schemaHash names the schema by the content of the migration files.
func schemaHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS(), path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func withDatabase(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + db
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToLower(hex.EncodeToString(b))
}
