// Package connlimit enforces a tenant's connection limit globally, across
// every gateway, in Redis.
//
// # Keys
//
// One hash per tenant, and nothing else:
//
//	<prefix>leases:{<tenant id>}   hash, TTL 3 x HeartbeatTTL, extended while held:
//	    <gateway id>      connections that gateway holds for the tenant
//	    hb:<gateway id>   its heartbeat: a deadline in the Redis server's
//	                      clock (TIME, ms), now + HeartbeatTTL (10 s)
//
// A connection is admitted by one Lua script, atomically: it sums the
// counts, counting only gateways whose heartbeat deadline has not passed
// (and deleting the fields of those whose has), refuses when the sum has
// reached the limit, else increments this gateway's count and moves its
// deadline on. Release decrements the count (deleting both fields at zero).
//
// Every script reads and writes only the tenant's hash, so the limiter runs
// unchanged on a single Redis, behind Redis Sentinel and on Redis Cluster:
// {<tenant id>} is the key's hash tag, and each tenant's leases live on the
// node serving its slot (the tenants spread over the cluster). A prefix
// must not itself contain braces, or every tenant shares one slot.
//
// # Crash safety
//
// Each gateway refreshes its heartbeat every HeartbeatTTL/3 in every tenant
// it holds connections for, and with it that hash's expiry, so only hashes
// nobody holds anything in expire. A gateway killed with SIGKILL stops
// refreshing; its deadlines pass within HeartbeatTTL, and the next
// admission for each tenant drops its counts. Its slots are thus free
// within HeartbeatTTL (10 s, inside the 30 s the design asks for). Deadlines
// are in the Redis server's clock, so gateways' clocks do not matter; after
// a Sentinel failover the new master's clock counts (skew between the two
// at most shortens or lengthens one heartbeat).
//
// Redis only ever receives increments from a live gateway: the admission
// and release scripts, and, on the refresh, the deltas of admissions made
// and releases missed while Redis was unreachable. Increments commute, so
// concurrent admissions never race a refresh. Only when this gateway's own
// heartbeat in a tenant it holds connections for had lapsed (others may
// have deleted its counts: the admission or the refresh reports it), or
// when the refresh finds a count in Redis other than the one this gateway
// holds while nothing changed it meanwhile (writes lost with an
// asynchronous Sentinel failover), does a refresh write its absolute
// counts; that write counts only if no admission or release ran between
// taking the counts and the write's reply, else it is repeated at the
// next refresh.
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
// Keys written by gateways before Sentinel and Cluster support were
// <prefix>conns:<tenant id> and <prefix>gw:<gateway id>; during a rolling
// upgrade from them, old and new gateways count separately, and the node's
// max_connections quota is the bound until the upgrade completes.
package connlimit
