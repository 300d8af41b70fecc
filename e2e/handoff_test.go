package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/e2e/internal/stack"
)

// A gateway with -handoff-dir on the node's host hands a plain-TCP
// device's socket to the node (-handoff-listen) instead of relaying it:
// the handed-off device and a device relayed by another gateway (no
// -handoff-dir) exchange messages through the node, and the first
// gateway counts the device as taken and its slot until it leaves.
func TestSocketHandoffEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := stack.New(t, bins, stack.Options{Gateways: 2,
		NodeArgs:    []string{"-handoff-listen", filepath.Join(dir, "node.sock")},
		GatewayArgs: [][]string{{"-handoff-dir", dir}, nil}})
	a := s.Signup(t)
	c := s.CreateCredential(t, a, []string{"#"}, []string{"#"}, nil)
	gw0, gw1 := s.Gateways[0], s.Gateways[1]
	// The node's socket exists before the gateways start, which dial it
	// before they listen.
	if !strings.Contains(gw0.Log(), "handoff: connected to a node") {
		t.Fatalf("gateway 0 is not connected to the node's handoff socket:\n%s", gw0.Log())
	}

	handed := mustConnectV5(t, gw0.MQTT, c, "handed")
	waitFor(t, 10*time.Second, "the handoff counted as taken", func() bool {
		return gatewayCounter(t, gw0, "berth_gateway_handoffs_total", `result="taken"`) == 1
	})
	relayed := mustConnectV5(t, gw1.MQTT, c, "relayed")
	handed.subscribe(t, "to-handed/#")
	relayed.subscribe(t, "to-relayed/#")
	if rc := relayed.publishCode(t, "to-handed/1", "from the relay", false); rc != 0 {
		t.Fatalf("relayed publish: PUBACK %#x", rc)
	}
	handed.expect(t, "to-handed/1=from the relay")
	if rc := handed.publishCode(t, "to-relayed/1", "from the handoff", false); rc != 0 {
		t.Fatalf("handed-off publish: PUBACK %#x", rc)
	}
	relayed.expect(t, "to-relayed/1=from the handoff")
	if n := gatewayCounter(t, gw1, "berth_gateway_handoffs_total", `result="taken"`); n != 0 {
		t.Fatalf("the gateway without -handoff-dir handed off %d devices", n)
	}
}
