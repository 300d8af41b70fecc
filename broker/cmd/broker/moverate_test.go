package main

import (
	"io"
	"testing"
)

// TestMoveDisconnectRateFlag: -move-disconnect-rate reaches the node's
// config, BERTH_MOVE_DISCONNECT_RATE fills it when the flag is unset, and
// the default is 500 a second.
func TestMoveDisconnectRateFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want int
	}{
		{"default", nil, nil, 500},
		{"flag", []string{"-move-disconnect-rate", "50"}, nil, 50},
		{"env", nil, map[string]string{"BERTH_MOVE_DISCONNECT_RATE": "75"}, 75},
		{"flag over env", []string{"-move-disconnect-rate", "20"}, map[string]string{"BERTH_MOVE_DISCONNECT_RATE": "75"}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range nodeEnv {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			cfg, err := parseConfig(append([]string{"-node-id", "n1", "-data", t.TempDir()}, tc.args...), func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.nodeConfig(nil).MoveDisconnectRate; got != tc.want {
				t.Fatalf("move disconnect rate %d, want %d", got, tc.want)
			}
		})
	}
}
