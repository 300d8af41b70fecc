// Package migrations holds Berth's Postgres schema as ordered SQL migrations,
// embedded so that the API, broker nodes, tests and tools all apply exactly
// the same files. Files live in sql/ as NNNNN_name.sql in goose format; a
// migration, once merged, never changes: add a new one instead.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	// The pgx database/sql driver, registered as "pgx".
	_ "github.com/jackc/pgx/v5/stdlib"
)

//go:embed sql/*.sql
var embedded embed.FS

// FS returns the migration files, rooted at the folder that holds them.
func FS() fs.FS {
	sub, err := fs.Sub(embedded, "sql")
	if err != nil {
		panic(err) // the embed pattern above guarantees the folder exists
	}
	return sub
}

// Up applies every pending migration to the database at url. Concurrent
// callers (several processes starting at once) serialize on a Postgres
// advisory lock, so each migration runs exactly once.
func Up(ctx context.Context, url string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return fmt.Errorf("migrations: open: %w", err)
	}
	defer db.Close()
	return UpDB(ctx, db)
}

// UpDB is Up on an open database handle.
func UpDB(ctx context.Context, db *sql.DB) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migrations: locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS(), goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migrations: provider: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	return nil
}

// Version returns the newest migration version in FS, which is the schema
// version a fully migrated database has.
func Version() (int64, error) {
	entries, err := fs.ReadDir(FS(), ".")
	if err != nil {
		return 0, err
	}
	var newest int64
	for _, e := range entries {
		var v int64
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err == nil && v > newest {
			newest = v
		}
	}
	return newest, nil
}
