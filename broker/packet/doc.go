// Package packet encodes and decodes MQTT control packets: MQTT 3.1
// (protocol level 3), 3.1.1 (level 4) and 5.0 (level 5), every packet type
// from CONNECT to AUTH, with all MQTT 5 properties and reason codes.
//
// It is shared by the broker and the gateway, which parses CONNECT with it.
//
// # Zero allocation
//
// Decode methods take the packet body (the bytes after the fixed header)
// and fill a caller-owned struct. Decoded []byte fields alias the body, and
// slices inside the struct (user properties, subscriptions, reason codes)
// are truncated and reused, so decoding into the same struct again
// allocates nothing. Append methods encode a whole packet onto dst and
// allocate nothing when dst has the capacity. Reader reads packets from a
// stream into one reusable buffer; Header and BodyInto let the caller put
// a body it keeps (a big PUBLISH payload) straight into its own buffer.
//
// # Errors
//
// Failures are ReasonCode values (ErrMalformed, ErrProtocol,
// ErrTopicNameInvalid, ErrPacketTooLarge, ...), usually wrapped in an
// *Error that adds the packet type and a detail and unwraps to the code, so
// errors.As(err, &code) yields what to put in the CONNACK or DISCONNECT.
// ReasonCode.ConnackV3 maps a code onto an MQTT 3.1.1 CONNACK return code.
//
// # Fan-out
//
// Publish.AppendHeader encodes a PUBLISH without its payload, so a message
// can go to many subscribers as net.Buffers{header, payload} with the
// payload shared. SetPacketID and SetPublishFlags patch an encoded PUBLISH
// in place; PacketIDOffset says where the identifier sits.
//
// # Wire format
//
// Every packet starts with a fixed header. The layout and the numbers below
// are fixed by the protocol and never change.
//
//	  bit    7   6   5   4   3   2   1   0
//	       +---------------+---------------+
//	byte 1 |  packet type  |     flags     |
//	       +---------------+---------------+
//	byte 2 | remaining length, 1 to 4 bytes|  variable byte integer:
//	  ...  | 7 bits each, low group first, |  bit 7 = more bytes follow,
//	byte 5 | max 268,435,455               |  a 5th byte is malformed
//	       +-------------------------------+
//	       | variable header and payload   |  "body": Remaining bytes
//	       +-------------------------------+
//
// Fixed flags per type [MQTT-2.1.3-1]: PUBREL, SUBSCRIBE and UNSUBSCRIBE
// carry 0010, PUBLISH carries DUP(3) QoS(2-1) RETAIN(0), all others 0000.
//
// Data types: two and four byte integers are big-endian; a UTF-8 string and
// Binary Data are a 2-byte length and that many bytes; a string pair is two
// strings.
//
// PUBLISH body:
//
//	+---------------------+-------------+----------------+-----------+
//	| topic name (string) | packet id   | properties     | payload   |
//	| 2-byte len + bytes  | 2 bytes,    | MQTT 5 only:   | the rest  |
//	|                     | QoS > 0 only| varint length  |           |
//	|                     |             | + properties   |           |
//	+---------------------+-------------+----------------+-----------+
//
// MQTT 5 properties: a variable byte integer giving their total length, then
// a sequence of (identifier byte, value). The identifier decides the value
// type; see the PropID constants for identifier, type and the packets that
// may carry each one.
//
//	+----------------+----+-------+----+-------+-----
//	| length (varint)| id | value | id | value | ...
//	+----------------+----+-------+----+-------+-----
//
// CONNECT body:
//
//	+--------------------+-------+-------+------------+------------+
//	| protocol name      | level | flags | keep alive | properties |
//	| "MQTT" / "MQIsdp"  | 3/4/5 |       | 2 bytes    | MQTT 5     |
//	+--------------------+-------+-------+------------+------------+
//	| client id | [will properties (5), will topic, will payload]  |
//	|           | [user name] [password]                           |
//	+-----------+--------------------------------------------------+
//
//	flags: bit 7 user name, 6 password, 5 will retain, 4-3 will QoS,
//	       2 will, 1 clean start, 0 reserved (must be 0)
//
// Acknowledgements (PUBACK, PUBREC, PUBREL, PUBCOMP) are a packet id, then
// in MQTT 5 an optional reason code and optional properties; SUBACK and
// UNSUBACK end with one reason code per filter; DISCONNECT and AUTH are an
// optional reason code and optional properties; PINGREQ and PINGRESP have
// no body.
package packet
