package plan

import (
	"testing"

	"berth.dev/quotas"
)

// The session caps fit what nodes enforce: every connection the
// connection quota admits can have a session, and the expiry cap is below
// MQTT's "never" (0xFFFFFFFF), so a capped session does expire.
func TestSessionCapsFitTheProtocol(t *testing.T) {
	for _, name := range Names() {
		p, _ := Lookup(name)
		for _, q := range []quotas.Quotas{p.Defaults, p.Max} {
			if q.MaxSessions < q.MaxConnections {
				t.Errorf("%s: max_sessions %d below max_connections %d", name, q.MaxSessions, q.MaxConnections)
			}
			if q.MaxSessionExpiry >= 0xFFFFFFFF {
				t.Errorf("%s: max_session_expiry %d is not below MQTT's never", name, q.MaxSessionExpiry)
			}
		}
	}
}
