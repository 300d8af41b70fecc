package node

import (
	"context"
	"testing"

	"berth.dev/testenv"
)

// TestPublicHostRegistered: a node started with PublicHost (-public-host)
// writes it into its nodes row beside mqtt_addr, where the gateways' DNS
// reads it.
func TestPublicHostRegistered(t *testing.T) {
	n := startNodeCfg(t, testenv.DatabaseURL(t), "", false, func(c *Config) { c.PublicHost = "node-test.hosts.example.net" })
	var host, addr string
	if err := n.pool.QueryRow(context.Background(), `SELECT public_host, mqtt_addr FROM nodes WHERE id = 'node-test'`).Scan(&host, &addr); err != nil {
		t.Fatal(err)
	}
	if host != "node-test.hosts.example.net" || addr == "" {
		t.Fatalf("nodes row: public_host %q mqtt_addr %q", host, addr)
	}
}
