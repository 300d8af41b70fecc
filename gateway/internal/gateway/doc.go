// Package gateway is Berth's MQTT-aware connection gateway: it accepts
// device connections (TCP, TLS, WebSocket, WebSocket over TLS),
// authenticates the CONNECT, admits it under the tenant's global
// connection limit, and relays the connection to the tenant's broker node
// behind a signed PROXY v2 header.
//
// # A connection's path
//
//	SYN ─────▶ SYNFilter (package synfilter, eBPF on the listening socket): a
//	   │        source's SYNs over PerIPRate/PerIPBurst dropped in the kernel, no
//	   │        SYN-ACK, no accept (berth_gateway_syn_dropped_total); off behind a
//	   │        load balancer or without CAP_BPF; detached from each admitted conn
//	   ▼
//	accept ──▶ global accept rate, per-IP connect rate,  (before any TLS/MQTT work)
//	   │        pending connections per source ≤ MaxPendingPerIP, a source in
//	   │        cool-down (cooldown.go: its CONNECTs kept failing; held in the
//	   │        kernel too, berth_gateway_flood_cooldowns_total)
//	   │        refused: reset at once (RST, SO_LINGER 0: no TIME_WAIT), unread, counted
//	   │        (berth_gateway_rate_limited_total{scope=global|ip|cooldown|pending}); the pending
//	   │        cap logs one Warn per 10 s, then a summary of the lines not logged
//	   │        From a ProxyProtocolFrom balancer (balancer.go): the global rate and
//	   │        ≤ ProxyProtocolMaxWaiting waiting for a header (scope=proxy_header)
//	   │        here; then its PROXY header (v1/v2, package proxyheader) within
//	   │        ProxyProtocolTimeout, or closed; then the per-IP rate and pending
//	   │        cap of the device it names, whose address is logged and signed
//	   ▼
//	tcp  (1883)  nothing more
//	tls  (8883)  TLS handshake (ALPN mqtt)
//	ws   (8083)  WebSocket upgrade on /mqtt, subprotocol "mqtt"
//	wss  (8084)  TLS handshake (ALPN http/1.1), then the same upgrade
//	             (tls and wss: one certificate store, reloaded from disk;
//	             a failed handshake is counted as reason tls_handshake;
//	             its server part takes a handshake slot, tlsslot.go:
//	             none within HandshakeWait → abandoned, reason tls_busy)
//	   ▼
//	read CONNECT: ConnectTimeout deadline, MaxConnectSize cap, exactly the
//	packet and not one byte more; the body's buffer grows as its bytes
//	arrive (4 KiB, then doubling), never to the announced size up front;
//	decoded with berth.dev/broker/packet
//	   ▼
//	handshake slot: ≤ MaxHandshakes (default GOMAXPROCS/2, at least 1)
//	token verifications and refusals (CONNACK and close) at once; waits
//	≤ HandshakeWait, then a token not verified yet ───── 0x89 / 0x03
//	(handshake.go; not held to read, nor after auth, nor to verify a
//	token whose JWT header never verified here: its key may be fetched)
//	   ▼
//	auth: password = JWT (jwtauth), user name = sub ── 0x86 / 0x04
//	revoked credential, unknown tenant,
//	SNI (tls, wss) ≠ tenant ────────────────────────── 0x87 / 0x05
//	tenant → node (route), JWKS down, no node ──────── 0x88 / 0x03
//	connection limit (connlimit, Redis) ────────────── 0x97 / 0x03
//	dial node ──────────────────────────────────────── 0x88 / 0x03
//	   ▼
//	write [signed PROXY v2 header][the client's CONNECT bytes] to the node
//	   ▼
//	relay both ways until either side closes, the credential is revoked,
//	or shutdown's grace period ends. TCP↔TCP: splice(2) through a pooled
//	pipe held only while bytes flow, with RawSyscall (no user-space copy,
//	no runtime wake-up per message: splice_linux.go);
//	TLS and WebSocket (ws, wss): io.CopyBuffer with pooled 32 KiB buffers.
//
// # Pending connections
//
// A connection is pending (unauthenticated) from accept until its CONNECT
// is verified and written to the node: the TLS handshake, the WebSocket
// upgrade (an HTTP connection kept alive without upgrading is pending too,
// for at most ConnectTimeout idle) and the CONNECT read all count. A
// source may have MaxPendingPerIP of them (-max-pending-per-ip, default
// 64): a source is an IPv4 address, or an IPv6 /64 (one host commonly
// holds a whole /64), for the per-IP rate too (source.go). Every listener shares the count; relayed
// connections do not count. The slot is given back on every path:
// relayed, refused, timed out, closed by either side.
//
// The node answers the CONNECT itself (CONNACK and everything after goes
// straight back to the client); the gateway only ever writes a CONNACK to
// refuse. Refusal codes: MQTT 5 reason codes, the nearest MQTT 3.1.1
// return code via packet.ReasonCode.ConnackV3 [MQTT-3.2.2-8] (3.1.1)
// [MQTT-3.2.2-7]: after a refusal CONNACK the connection is closed (a
// normal close, unlike the reset of a refusal at accept). Each refusal is
// counted (berth_gateway_refusals_total{reason}); its "connect refused"
// log line is written for the first 50 of every 10 s only, then one
// summary line says how many were not (quietLog).
//
// # A connect's trace
//
// Each CONNECT that arrives (not a connection closed before sending one) is
// a trace (trace.go), sampled at Config.TraceSample; the tracer provider
// is injected (Deps.Tracer, see package tracing). When an MQTT 5 CONNECT
// carries a W3C traceparent user property (tracestate too), the connect
// span is a child of the device's span and follows its sampled flag.
//
//	gateway.connect   server span, accept → CONNECT forwarded or refusal sent
//	  │  tenant_id (once known), protocol_version (3, 4, 5), transport (tcp, tls, ws, wss),
//	  │  client_id, outcome (connected, refused), reason and reason_code (refused;
//	  │  reason_code is the MQTT 5 code, absent when no CONNACK was sent),
//	  │  status Error with the reason when refused
//	  ├─ parse       read and decode the CONNECT
//	  ├─ auth        JWT verify, revocation                     credential_id
//	  ├─ admission   placement and quota lookup, SNI, limit     max_connections
//	  └─ route       dial the node, PROXY header + CONNECT      node_id
//
// Children run back to back and stop at the phase that refused, which
// records the error (an exception event and status Error with its text).
// The tenant reads these spans, so they name no address: the node by its
// id, never its host:port, and no client or gateway address. A cause from
// inside the service or the network (node, Redis, Postgres or JWKS down, a
// read error, the CONNECT deadline, shutdown) is recorded as the refusal's
// label; the full error goes to the gateway's log. Causes about what the
// device sent (a malformed CONNECT, a bad token, a server name that is not
// its tenant's) keep their text.
// Every span carries tenant_id once the token named it, so package
// tracing keeps the whole tree per tenant in Postgres. The spans are made
// when the outcome is known, from times noted on the way: an unsampled
// connect pays a handful of clock reads and the sampling decision.
package gateway
