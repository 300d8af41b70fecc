package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"berth.dev/services/apiclient"
)

func runTenants(ctx context.Context, e *env, args []string) error {
	return subcommand(ctx, e, "tenants", args, "list", map[string]func(context.Context, *env, []string) error{
		"list": tenantsList, "create": tenantsCreate, "use": tenantsUse,
	})
}

func tenantsList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "tenants list", "[--limit N | --all] [--json]", "  berthctl tenants\n  berthctl tenants --all --json | jq -r '.items[].id'").withAPI().withJSON().withPages()
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	s, err := open(e, f)
	if err != nil {
		return err
	}
	items, printed, err := listPages[apiclient.Tenant](ctx, e, f, s, apiclient.ListTenants, nil, nil)
	if printed || err != nil {
		return err
	}
	rows := make([][]string, 0, len(items))
	for _, t := range items {
		mark := ""
		if t.ID == s.cfg.Tenant {
			mark = "*"
		}
		rows = append(rows, []string{mark + t.ID, t.Slug, t.Plan, t.Endpoints.MQTT, when(&t.CreatedAt)})
	}
	table(e.stdout, []string{"ID", "SLUG", "PLAN", "MQTT", "CREATED"}, rows)
	return nil
}

func tenantsCreate(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "tenants create", "--slug SLUG [--plan PLAN] [--json]", "  berthctl tenants create --slug staging --plan free").withAPI().withJSON()
	slug := f.String("slug", "", "the tenant's slug: lowercase letters, digits, hyphens (required)")
	plan := f.String("plan", "", "plan (default the API's default plan)")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	if *slug == "" {
		f.Usage()
		return usagef("tenants create: --slug is required")
	}
	body := map[string]string{"slug": *slug}
	if *plan != "" {
		body["plan"] = *plan
	}
	var t apiclient.Tenant
	if ok, err := accountCall(ctx, e, f, apiclient.CreateTenant, nil, nil, body, &t); !ok || err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Created tenant %s (%s), plan %s; berthctl tenants use %s makes it the default\n", t.Slug, t.ID, t.Plan, t.Slug)
	return nil
}

func tenantsUse(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "tenants use", "ID|SLUG", "  berthctl tenants use staging").withAPI()
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	s, err := open(e, f)
	if err != nil {
		return err
	}
	f.tenant = &pos[0]
	t, err := s.tenant(ctx, e, f)
	if err != nil {
		return err
	}
	s.cfg.Tenant = t.ID
	if err := s.cfg.save(e); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Default tenant: %s (%s)\n", t.Slug, t.ID)
	return nil
}

func runCredentials(ctx context.Context, e *env, args []string) error {
	return subcommand(ctx, e, "credentials", args, "list", map[string]func(context.Context, *env, []string) error{
		"list": credentialsList, "create": credentialsCreate, "token": credentialsToken, "revoke": credentialsRevoke,
	})
}

func credentialsList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "credentials list", "[--limit N | --all] [--json]", "  berthctl credentials\n  berthctl credentials --all --json --tenant staging").withTenant().withJSON().withPages()
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	items, printed, err := tenantList[apiclient.Credential](ctx, e, f, apiclient.ListCredentials, nil)
	if printed || err != nil {
		return err
	}
	rows := make([][]string, 0, len(items))
	for _, c := range items {
		state := "active"
		if c.RevokedAt != nil {
			state = "revoked"
		} else if c.ExpiresAt != nil && c.ExpiresAt.Before(time.Now()) {
			state = "expired"
		}
		rows = append(rows, []string{c.ID, c.Name, c.Kind, orDash(strings.Join(c.ACL.Pub, ",")), orDash(strings.Join(c.ACL.Sub, ",")), state, when(c.ExpiresAt), when(&c.CreatedAt)})
	}
	table(e.stdout, []string{"ID", "NAME", "KIND", "PUB", "SUB", "STATE", "EXPIRES", "CREATED"}, rows)
	return nil
}

func credentialsCreate(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "credentials create", "NAME [--pub FILTER]... [--sub FILTER]... [--expires DURATION] [--json]",
		"  berthctl credentials create sensor-12 --pub 'sensors/12/#' --sub 'cmd/12/#'").withTenant().withJSON()
	var pub, sub listFlag
	f.Var(&pub, "pub", "topic filter the credential may publish to (repeatable, or comma-separated)")
	f.Var(&sub, "sub", "topic filter the credential may subscribe to (repeatable, or comma-separated)")
	expires := f.Duration("expires", 0, "the credential expires after this long (default never)")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if len(pub)+len(sub) == 0 {
		f.Usage()
		return usagef("credentials create: give at least one --pub or --sub filter")
	}
	body := map[string]any{"name": pos[0], "acl": apiclient.ACL{Pub: nonNil(pub), Sub: nonNil(sub)}}
	if *expires > 0 {
		body["expires_at"] = time.Now().Add(*expires).UTC().Format(time.RFC3339)
	}
	var c apiclient.Credential
	if ok, err := tenantCall(ctx, e, f, apiclient.CreateCredential, nil, nil, body, &c); !ok || err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Created credential %s (%s). The password is shown once; berthctl credentials token %s issues another.\n\n", c.Name, c.ID, c.ID)
	table(e.stdout, []string{"MQTT ADDRESS", "USERNAME", "PASSWORD"}, [][]string{{c.MQTTAddr, c.Username, c.Password}})
	return nil
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func credentialsToken(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "credentials token", "ID [--ttl DURATION] [--json]", "  berthctl credentials token crd_... --ttl 24h").withTenant().withJSON()
	ttl := f.Duration("ttl", 0, "the token expires after this long (default the credential's expiry, else never)")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	s, err := open(e, f)
	if err != nil {
		return err
	}
	t, err := s.tenant(ctx, e, f)
	if err != nil {
		return err
	}
	body := map[string]string{}
	if *ttl > 0 {
		body["expires_at"] = time.Now().Add(*ttl).UTC().Format(time.RFC3339)
	}
	var tok apiclient.IssuedToken
	if ok, err := s.call(ctx, e, f, apiclient.IssueToken, []string{t.ID, pos[0]}, nil, body, &tok); !ok || err != nil {
		return err
	}
	table(e.stdout, []string{"MQTT ADDRESS", "USERNAME", "PASSWORD", "EXPIRES"}, [][]string{{t.Endpoints.MQTT, tok.Username, tok.Password, when(tok.ExpiresAt)}})
	return nil
}

func credentialsRevoke(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "credentials revoke", "ID", "  berthctl credentials revoke crd_...").withTenant()
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if _, err := tenantCall(ctx, e, f, apiclient.RevokeCredential, pos, nil, nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "Revoked %s; its connections are closed.\n", pos[0])
	return nil
}
