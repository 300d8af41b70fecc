// Command migrate applies Berth's embedded Postgres migrations.
//
//	migrate -database-url postgres://...   (or DATABASE_URL)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"berth.dev/migrations"
)

// version and revision are linked in by the image build (infra/images):
// -ldflags "-X main.version=… -X main.revision=…"; -version prints them.
var version, revision = "dev", "unknown"

func main() {
	fs := flag.NewFlagSet("migrate", flag.ExitOnError)
	url := fs.String("database-url", os.Getenv("DATABASE_URL"), "Postgres URL (env DATABASE_URL)")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	showVersion := fs.Bool("version", false, "print the version and revision, and exit")
	_ = fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Printf("migrate %s (revision %s)\n", version, revision)
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *url == "" {
		fmt.Fprintln(os.Stderr, "migrate: -database-url or DATABASE_URL is required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := migrations.Up(ctx, *url); err != nil {
		log.Error("migrate failed", "err", err)
		os.Exit(1)
	}
	v, _ := migrations.Version()
	log.Info("schema up to date", "version", v)
}
