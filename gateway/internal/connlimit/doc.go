// Package connlimit enforces a tenant's connection limit globally, across
// every gateway, in Redis.
//
// # Keys
//
//	<prefix>conns:<tenant id>   hash: gateway id -> connections that gateway holds;
//	                            TTL 3 x HeartbeatTTL, extended while held
//	<prefix>gw:<gateway id>     heartbeat: "1", TTL HeartbeatTTL (10 s)
//
// A connection is admitted by one Lua script, atomically: it sums the hash,
// counting only gateways whose heartbeat key still exists (and deleting the
// fields of those whose heartbeat is gone), refuses when the sum has
// reached the limit, else increments this gateway's field and refreshes its
// heartbeat. Release decrements the field (never below zero).
//
// # Crash safety
//
// Each gateway refreshes its heartbeat every HeartbeatTTL/3, and with it
// the expiry (3 x HeartbeatTTL) of the hash of every tenant it holds
// connections for, so only hashes nobody holds anything in expire. A gateway
// killed with SIGKILL stops refreshing; its heartbeat expires within
// HeartbeatTTL, and the next admission for each tenant drops its counts.
// Its slots are thus free within HeartbeatTTL (10 s, inside the 30 s the
// design asks for).
//
// Redis only ever receives increments from a live gateway: the admission
// and release scripts, and, on the refresh, the deltas of admissions made
// and releases missed while Redis was unreachable. Increments commute, so
// concurrent admissions never race a refresh. Only when this gateway's own
// heartbeat had lapsed (others may have deleted its counts) does a refresh
// write its absolute counts; that write counts only if no admission or
// release ran between taking the counts and the write's reply, else it is
// repeated at the next refresh.
//
// # Redis unavailable: fail open
//
// Every Redis call has a tight timeout (Timeout, 250 ms). When Redis cannot
// be reached in time, Acquire admits the connection (Lease.Degraded is true)
// unless FailClosed is set. The reasons: the node enforces the tenant's
// max_connections quota on its own (CONNACK 0x97 over it; see
// broker/internal/node, admitConn), so the limit still holds per node; a
// Redis outage must not disconnect every device of every tenant at the
// next reconnect storm; and connections admitted while degraded are counted
// locally and written to Redis by the next successful refresh, so the
// global count is right again as soon as Redis is back.
//
// The script touches heartbeat keys it computes from the hash's fields, so
// it needs a single Redis (or all keys of a prefix on one Cluster slot).
package connlimit
