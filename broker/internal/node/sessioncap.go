package node

import (
	"math"

	"berth.dev/quotas"
)

// sessionCaps maps a tenant's max_sessions and max_session_expiry quotas
// onto its shard's session caps (shard.Shard.SetSessionCaps): a CONNECT
// that would create a session over max_sessions gets CONNACK 0x97 (3.1.1:
// return code 3), and no session outlives its connection by more than
// max_session_expiry seconds, MQTT 3.1.1 clean-session-0 ones included.
// A quotas row without them (0) caps nothing.
func sessionCaps(q quotas.Quotas) (maxSessions int, maxExpiry uint32) {
	return int(min(max(q.MaxSessions, 0), math.MaxInt32)),
		uint32(min(max(q.MaxSessionExpiry, 0), math.MaxUint32))
}
