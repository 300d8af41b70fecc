package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"berth.dev/broker/internal/node"
)

// nodeEnv is what a node needs besides replication.
var nodeEnv = map[string]string{"BERTH_PROXY_SECRET": "0123456789abcdef", "BERTH_NODE_TOKEN": "0123456789abcdef", "DATABASE_URL": "postgres://db"}

// TestReplicationFlags: -peers, -peer-listen, -peer-secret (flag, env or
// file), -zone and -replicas reach the node's Config; bad values are
// refused before anything starts.
func TestReplicationFlags(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("peer-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"-node-id", "n1", "-data", t.TempDir()}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		want     []node.Peer
		secret   string
		zone     string
		listen   string
		replicas int
		wantErr  bool
	}{
		{name: "peers with zones, secret from env",
			args:   []string{"-peers", "n2=10.0.0.2:7881@eu-1b, n3=10.0.0.3:7881", "-peer-listen", ":7999", "-zone", "eu-1a", "-replicas", "2"},
			env:    map[string]string{"BERTH_PEER_SECRET": "peer-secret-from-env"},
			want:   []node.Peer{{ID: "n2", Addr: "10.0.0.2:7881", Zone: "eu-1b"}, {ID: "n3", Addr: "10.0.0.3:7881"}},
			secret: "peer-secret-from-env", zone: "eu-1a", listen: ":7999", replicas: 2},
		{name: "secret from file", args: []string{"-peers", "n2=127.0.0.1:7882", "-peer-secret-file", secretFile},
			want: []node.Peer{{ID: "n2", Addr: "127.0.0.1:7882"}}, secret: "peer-secret-0123456789"},
		{name: "no secret", args: []string{"-peers", "n2=127.0.0.1:7882"}, wantErr: true},
		{name: "short secret", args: []string{"-peers", "n2=127.0.0.1:7882", "-peer-secret", "short"}, wantErr: true},
		{name: "peer without address", args: []string{"-peers", "n2", "-peer-secret-file", secretFile}, wantErr: true},
		{name: "peer address without port", args: []string{"-peers", "n2=10.0.0.2", "-peer-secret-file", secretFile}, wantErr: true},
		{name: "this node in the list is skipped, its zone taken",
			args: []string{"-peers", "n1=10.0.0.1:7881@eu-1a,n2=10.0.0.2:7881@eu-1b", "-peer-secret-file", secretFile},
			want: []node.Peer{{ID: "n2", Addr: "10.0.0.2:7881", Zone: "eu-1b"}}, secret: "peer-secret-0123456789", zone: "eu-1a", listen: ":7881", replicas: 3},
		{name: "the same node twice", args: []string{"-peers", "n2=127.0.0.1:7882,n2=127.0.0.1:7883", "-peer-secret-file", secretFile}, wantErr: true},
		{name: "missing secret file", args: []string{"-peers", "n2=127.0.0.1:7882", "-peer-secret-file", secretFile + ".gone"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range nodeEnv {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			cfg, err := parseConfig(append(append([]string(nil), base...), tc.args...), func(k string) string { return env[k] }, io.Discard)
			if tc.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			nc := cfg.nodeConfig(nil)
			if diff := cmp.Diff(tc.want, nc.Peers); diff != "" {
				t.Fatalf("peers (-want +got):\n%s", diff)
			}
			if string(nc.PeerSecret) != tc.secret {
				t.Fatalf("peer secret %q, want %q", nc.PeerSecret, tc.secret)
			}
			if tc.zone != "" && (nc.Zone != tc.zone || nc.Replicas != tc.replicas || nc.PeerListen != tc.listen) {
				t.Fatalf("zone %q replicas %d peer listen %q, want %q %d %q", nc.Zone, nc.Replicas, nc.PeerListen, tc.zone, tc.replicas, tc.listen)
			}
		})
	}
}
