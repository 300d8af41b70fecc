package config

import (
	"flag"
	"testing"
)

// Budget webhooks to private addresses are refused unless the flag, or its
// environment variable, allows them.
func TestWebhookAllowPrivate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want bool
	}{{nil, "", false}, {nil, "true", true}, {[]string{"-webhook-allow-private"}, "", true}, {[]string{"-webhook-allow-private=false"}, "true", false}} {
		env := map[string]string{"DATABASE_URL": "postgres://db/x", "BERTH_BILLING_WEBHOOK_ALLOW_PRIVATE": tc.env}
		c, err := Parse(flag.NewFlagSet("t", flag.ContinueOnError), tc.args, func(k string) string { return env[k] })
		if err != nil || c.WebhookAllowPrivate != tc.want {
			t.Errorf("%v with env %q: %v, %v; want %v", tc.args, tc.env, c.WebhookAllowPrivate, err, tc.want)
		}
	}
}
