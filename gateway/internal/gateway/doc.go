// Package gateway is Berth's MQTT-aware connection gateway: it accepts
// device connections (TCP, TLS, WebSocket), authenticates the CONNECT,
// admits it under the tenant's global connection limit, and relays the
// connection to the tenant's broker node behind a signed PROXY v2 header.
//
// # A connection's path
//
//	accept ──▶ global accept rate, per-IP connect rate   (before any TLS/MQTT work)
//	   │        refused: closed at once, counted
//	   ▼
//	TLS handshake (8883) / WebSocket upgrade on /mqtt, subprotocol "mqtt" (8083)
//	   ▼
//	read CONNECT: ConnectTimeout deadline, MaxConnectSize cap, exactly the
//	packet and not one byte more; decoded with berth.dev/broker/packet
//	   ▼
//	auth: password = JWT (jwtauth), user name = sub ── 0x86 / 0x04
//	revoked credential, unknown tenant, SNI ≠ tenant ── 0x87 / 0x05
//	tenant → node (route), JWKS down, no node ──────── 0x88 / 0x03
//	connection limit (connlimit, Redis) ────────────── 0x97 / 0x03
//	dial node ──────────────────────────────────────── 0x88 / 0x03
//	   ▼
//	write [signed PROXY v2 header][the client's CONNECT bytes] to the node
//	   ▼
//	relay both ways until either side closes, the credential is revoked,
//	or shutdown's grace period ends. TCP↔TCP: io.Copy between the two
//	*net.TCPConn, which the kernel does with splice(2) (no user-space copy);
//	TLS and WebSocket: io.CopyBuffer with pooled 32 KiB buffers.
//
// The node answers the CONNECT itself (CONNACK and everything after goes
// straight back to the client); the gateway only ever writes a CONNACK to
// refuse. Refusal codes: MQTT 5 reason codes, the nearest MQTT 3.1.1
// return code via packet.ReasonCode.ConnackV3 [MQTT-3.2.2-8] (3.1.1)
// [MQTT-3.2.2-7]: after a refusal CONNACK the connection is closed.
package gateway
