// Package loadgen drives an MQTT broker with many real client connections
// and measures what the broker actually did: connections held, messages
// accepted, messages delivered, end-to-end latency, loss and duplicates.
// It speaks MQTT 3.1.1 or 5.0 with Berth's own codec (berth.dev/broker/packet)
// over TCP, TLS or WebSocket, and is the engine of cmd/loadtest and make bench.
//
// # Modes
//
//   - conn: dial up to each level in Config.Levels with at most
//     DialConcurrency dials in flight, hold for Hold, then verify every
//     session with PINGREQ/PINGRESP. Failures are classified (refused,
//     timeout, reset, rejected by CONNACK, client port or fd limits).
//   - pub: Pubs publishers send as fast as possible (or at Rate messages/s
//     each). QoS 1 and 2 are pipelined up to the inflight window (the
//     server's Receive Maximum or Config.Inflight, whichever is smaller); a
//     message counts as accepted when its PUBACK or PUBCOMP arrives. QoS 0
//     has no acknowledgement, so subscribers on prefix/# count what arrived.
//   - pubsub: publisher i sends to topic i mod Topics and subscriber j
//     subscribes to topic j mod Topics, which gives fan-out (one topic, many
//     subscribers) and fan-in (many publishers, one subscriber). Every
//     subscriber counts unique messages per publisher, duplicates and loss,
//     and records end-to-end latency in a log-linear histogram.
//
// Every run is bounded: a duration and optional message count per
// publisher, a drain limit after the last publish, and caps on the number of
// connections. Targets outside loopback are refused unless AllowRemote is
// set, so a mistyped address cannot load someone else's broker.
//
// # Payload
//
// Each payload starts with a 16-byte stamp, then zero padding up to
// Config.Payload bytes (at least 16). Big-endian:
//
//	 0               4               8                              16
//	+---------------+---------------+-------------------------------+-----
//	| publisher id  | sequence      | send time, Unix nanoseconds   | pad
//	| uint32        | uint32, from 0| int64, stamped just before the|
//	|               |               | packet is written             |
//	+---------------+---------------+-------------------------------+-----
//
// End-to-end latency is the subscriber's receive time minus the send time;
// both ends share one clock because the tool runs publishers and
// subscribers in one process. The send time is when the message was
// written, not when a paced publisher meant to send it, so a publisher that
// stalls (blocked by a saturated broker) is not corrected for: under
// saturation read the delivered rate, not the latency.
//
// # Topics
//
//	<TopicPrefix>/<n>      n = 0 .. Topics-1; TopicPrefix defaults to
//	                       "berth-load/<run id>" so runs never see each other
package loadgen
