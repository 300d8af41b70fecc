package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"berth.dev/billing/plan"
)

// grant is the operator's command for paid plans without payment:
//
//	billing grant -account acc_… -plan pro [-revoke]
//
// It entitles (or, with -revoke, no longer entitles) the account to the
// plan whatever its payment method: the way to give paid plans when the
// service runs without a Stripe key, and to comp an account when it runs
// with one. DATABASE_URL fills -database-url.
func grant(args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("billing grant", flag.ContinueOnError)
	dbURL := fs.String("database-url", getenv("DATABASE_URL"), "Postgres URL (DATABASE_URL)")
	account := fs.String("account", "", "account id (acc_…)")
	planName := fs.String("plan", "", "plan to grant (pro, business)")
	revoke := fs.Bool("revoke", false, "withdraw the grant instead")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *dbURL == "" || *account == "" || *planName == "" {
		return errors.New("grant: -database-url (DATABASE_URL), -account and -plan are required")
	}
	if _, err := plan.Lookup(*planName); err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer conn.Close(ctx)
	if *revoke {
		if _, err := conn.Exec(ctx, `DELETE FROM plan_grants WHERE account_id = $1 AND plan = $2`, *account, *planName); err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "revoked: %s is no longer granted %s\n", *account, *planName)
		return err
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)`, *account).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("grant: no account %s", *account)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO plan_grants (account_id, plan) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		*account, *planName); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "granted: %s may put tenants on %s\n", *account, *planName)
	return err
}
