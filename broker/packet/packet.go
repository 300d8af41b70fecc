package packet

// Type is the MQTT control packet type, the high nibble of the first byte of
// every packet.
type Type byte

// Control packet types. The values are fixed by the protocol and never change.
const (
	TypeReserved    Type = 0 // forbidden on the wire
	TypeConnect     Type = 1
	TypeConnack     Type = 2
	TypePublish     Type = 3
	TypePuback      Type = 4
	TypePubrec      Type = 5
	TypePubrel      Type = 6
	TypePubcomp     Type = 7
	TypeSubscribe   Type = 8
	TypeSuback      Type = 9
	TypeUnsubscribe Type = 10
	TypeUnsuback    Type = 11
	TypePingreq     Type = 12
	TypePingresp    Type = 13
	TypeDisconnect  Type = 14
	TypeAuth        Type = 15 // MQTT 5 only
)

var typeNames = [16]string{
	"RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP",
	"SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH",
}

// String returns the packet type name as the specification spells it.
func (t Type) String() string {
	if t > 15 {
		return "INVALID"
	}
	return typeNames[t]
}

// Protocol levels carried in CONNECT.
const (
	Version31  byte = 3 // MQTT 3.1, protocol name "MQIsdp"
	Version311 byte = 4 // MQTT 3.1.1, protocol name "MQTT"
	Version5   byte = 5 // MQTT 5.0, protocol name "MQTT"
)

// Limits fixed by the protocol.
const (
	// MaxRemaining is the largest remaining length a 4-byte variable byte
	// integer can carry.
	MaxRemaining = 268_435_455
	// MaxPacketSize is the largest possible packet: 1 type byte, 4 length
	// bytes and MaxRemaining bytes.
	MaxPacketSize = 1 + 4 + MaxRemaining
	// MaxSubscriptionID is the largest subscription identifier.
	MaxSubscriptionID = MaxRemaining
)

// FixedHeader is the first 2..5 bytes of every packet.
type FixedHeader struct {
	Type      Type
	Flags     byte // low nibble of the first byte
	Remaining int  // number of bytes after the fixed header
}

// UserProperty is one MQTT 5 user property (identifier 0x26). Key and Value
// alias the decoded buffer.
type UserProperty struct {
	Key, Value []byte
}

// Connect is the CONNECT packet. Decode fills Version and ProtocolName from
// the packet itself; the version argument of Decode is ignored.
type Connect struct {
	ProtocolName []byte // "MQTT" (levels 4, 5) or "MQIsdp" (level 3)
	Version      byte   // Version31, Version311 or Version5
	CleanStart   bool   // "clean session" in 3.1.1
	KeepAlive    uint16 // seconds
	ClientID     []byte

	WillFlag    bool
	WillQoS     byte
	WillRetain  bool
	WillProps   Properties // MQTT 5 only
	WillTopic   []byte
	WillPayload []byte

	UsernameFlag bool
	PasswordFlag bool
	Username     []byte
	Password     []byte

	Props Properties // MQTT 5 only
}

// Connack is the CONNACK packet. In 3.1.1 the return code travels as
// Reason.ConnackV3() and is decoded back with ReasonFromConnackV3.
type Connack struct {
	SessionPresent bool
	Reason         ReasonCode
	Props          Properties
}

// Publish is the PUBLISH packet.
type Publish struct {
	Dup      bool
	QoS      byte
	Retain   bool
	Topic    []byte
	PacketID uint16 // present only when QoS > 0
	Props    Properties
	Payload  []byte
}

// Ack is PUBACK, PUBREC, PUBREL or PUBCOMP, told apart by Type.
type Ack struct {
	Type     Type
	PacketID uint16
	Reason   ReasonCode // MQTT 5 only; always CodeSuccess in 3.1.1
	Props    Properties
}

// Subscription is one topic filter of a SUBSCRIBE with its options.
type Subscription struct {
	Filter            []byte
	QoS               byte
	NoLocal           bool // MQTT 5
	RetainAsPublished bool // MQTT 5
	RetainHandling    byte // MQTT 5: 0, 1 or 2
}

// Subscribe is the SUBSCRIBE packet.
type Subscribe struct {
	PacketID      uint16
	Props         Properties
	Subscriptions []Subscription
}

// Suback is the SUBACK packet. In 3.1.1 only CodeGrantedQoS0..2 and
// ErrUnspecified (0x80) may appear.
type Suback struct {
	PacketID uint16
	Props    Properties
	Reasons  []ReasonCode
}

// Unsubscribe is the UNSUBSCRIBE packet.
type Unsubscribe struct {
	PacketID uint16
	Props    Properties
	Filters  [][]byte
}

// Unsuback is the UNSUBACK packet. Reasons is empty in 3.1.1.
type Unsuback struct {
	PacketID uint16
	Props    Properties
	Reasons  []ReasonCode
}

// Ping is PINGREQ or PINGRESP, told apart by Type. Both have no body.
type Ping struct {
	Type Type
}

// Disconnect is the DISCONNECT packet. Reason and Props are MQTT 5 only.
type Disconnect struct {
	Reason ReasonCode
	Props  Properties
}

// Auth is the MQTT 5 AUTH packet.
type Auth struct {
	Reason ReasonCode
	Props  Properties
}

// Every packet struct has the same two methods:
//
//	Decode(version byte, fh FixedHeader, body []byte) error
//	Append(dst []byte, version byte) ([]byte, error)
//
// Decode parses body (the bytes after the fixed header) into the receiver.
// Decoded []byte fields alias body; slices owned by the receiver are reused,
// so decoding into the same struct again allocates nothing. Append encodes
// the whole packet, fixed header included, appending to dst.
