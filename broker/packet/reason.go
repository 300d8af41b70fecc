package packet

import "strconv"

// ReasonCode is an MQTT 5 reason code. Codes below 0x80 report success;
// codes from 0x80 up are failures and are used as error values throughout
// the broker, so a refusal travels as an error and ends up in the CONNACK,
// SUBACK, PUBACK or DISCONNECT that reports it. ReasonCode implements error.
type ReasonCode byte

// Success reason codes.
const (
	CodeSuccess                ReasonCode = 0x00 // also Normal disconnection, Granted QoS 0
	CodeNormalDisconnection    ReasonCode = 0x00
	CodeGrantedQoS0            ReasonCode = 0x00
	CodeGrantedQoS1            ReasonCode = 0x01
	CodeGrantedQoS2            ReasonCode = 0x02
	CodeDisconnectWithWill     ReasonCode = 0x04
	CodeNoMatchingSubscribers  ReasonCode = 0x10
	CodeNoSubscriptionExisted  ReasonCode = 0x11
	CodeContinueAuthentication ReasonCode = 0x18
	CodeReAuthenticate         ReasonCode = 0x19
)

// Failure reason codes; each is an error value.
const (
	ErrUnspecified                 ReasonCode = 0x80
	ErrMalformed                   ReasonCode = 0x81
	ErrProtocol                    ReasonCode = 0x82
	ErrImplementationSpecific      ReasonCode = 0x83
	ErrUnsupportedProtocolVersion  ReasonCode = 0x84
	ErrClientIDNotValid            ReasonCode = 0x85
	ErrBadUsernameOrPassword       ReasonCode = 0x86
	ErrNotAuthorized               ReasonCode = 0x87
	ErrServerUnavailable           ReasonCode = 0x88
	ErrServerBusy                  ReasonCode = 0x89
	ErrBanned                      ReasonCode = 0x8A
	ErrServerShuttingDown          ReasonCode = 0x8B
	ErrBadAuthMethod               ReasonCode = 0x8C
	ErrKeepAliveTimeout            ReasonCode = 0x8D
	ErrSessionTakenOver            ReasonCode = 0x8E
	ErrTopicFilterInvalid          ReasonCode = 0x8F
	ErrTopicNameInvalid            ReasonCode = 0x90
	ErrPacketIDInUse               ReasonCode = 0x91
	ErrPacketIDNotFound            ReasonCode = 0x92
	ErrReceiveMaximumExceeded      ReasonCode = 0x93
	ErrTopicAliasInvalid           ReasonCode = 0x94
	ErrPacketTooLarge              ReasonCode = 0x95
	ErrMessageRateTooHigh          ReasonCode = 0x96
	ErrQuotaExceeded               ReasonCode = 0x97
	ErrAdministrativeAction        ReasonCode = 0x98
	ErrPayloadFormatInvalid        ReasonCode = 0x99
	ErrRetainNotSupported          ReasonCode = 0x9A
	ErrQoSNotSupported             ReasonCode = 0x9B
	ErrUseAnotherServer            ReasonCode = 0x9C
	ErrServerMoved                 ReasonCode = 0x9D
	ErrSharedSubsNotSupported      ReasonCode = 0x9E
	ErrConnectionRateExceeded      ReasonCode = 0x9F
	ErrMaximumConnectTime          ReasonCode = 0xA0
	ErrSubscriptionIDsNotSupported ReasonCode = 0xA1
	ErrWildcardSubsNotSupported    ReasonCode = 0xA2
)

var reasonNames = map[ReasonCode]string{
	0x00: "success", 0x01: "granted QoS 1", 0x02: "granted QoS 2", 0x04: "disconnect with will message",
	0x10: "no matching subscribers", 0x11: "no subscription existed", 0x18: "continue authentication",
	0x19: "re-authenticate", 0x80: "unspecified error", 0x81: "malformed packet", 0x82: "protocol error",
	0x83: "implementation specific error", 0x84: "unsupported protocol version",
	0x85: "client identifier not valid", 0x86: "bad user name or password", 0x87: "not authorized",
	0x88: "server unavailable", 0x89: "server busy", 0x8A: "banned", 0x8B: "server shutting down",
	0x8C: "bad authentication method", 0x8D: "keep alive timeout", 0x8E: "session taken over",
	0x8F: "topic filter invalid", 0x90: "topic name invalid", 0x91: "packet identifier in use",
	0x92: "packet identifier not found", 0x93: "receive maximum exceeded", 0x94: "topic alias invalid",
	0x95: "packet too large", 0x96: "message rate too high", 0x97: "quota exceeded",
	0x98: "administrative action", 0x99: "payload format invalid", 0x9A: "retain not supported",
	0x9B: "QoS not supported", 0x9C: "use another server", 0x9D: "server moved",
	0x9E: "shared subscriptions not supported", 0x9F: "connection rate exceeded",
	0xA0: "maximum connect time", 0xA1: "subscription identifiers not supported",
	0xA2: "wildcard subscriptions not supported",
}

// Error implements error. It returns the specification's name of the code.
func (c ReasonCode) Error() string {
	if s, ok := reasonNames[c]; ok {
		return "packet: " + s
	}
	return "packet: reason code 0x" + strconv.FormatUint(uint64(c), 16)
}

// String returns the same text as Error.
func (c ReasonCode) String() string { return c.Error() }

// IsFailure reports whether c is a failure code (0x80 and above).
func (c ReasonCode) IsFailure() bool { return c >= 0x80 }

// MQTT 3.1.1 CONNACK return codes.
const (
	ConnackAccepted              byte = 0
	ConnackBadProtocolVersion    byte = 1
	ConnackIdentifierRejected    byte = 2
	ConnackServerUnavailable     byte = 3
	ConnackBadUsernameOrPassword byte = 4
	ConnackNotAuthorized         byte = 5
)

// ConnackV3 maps c onto the nearest MQTT 3.1.1 CONNACK return code (0..5).
func (c ReasonCode) ConnackV3() byte {
	switch c {
	case CodeSuccess:
		return ConnackAccepted
	case ErrUnsupportedProtocolVersion:
		return ConnackBadProtocolVersion
	case ErrClientIDNotValid:
		return ConnackIdentifierRejected
	case ErrBadUsernameOrPassword, ErrBadAuthMethod:
		return ConnackBadUsernameOrPassword
	case ErrNotAuthorized, ErrBanned:
		return ConnackNotAuthorized
	default:
		return ConnackServerUnavailable
	}
}

// ReasonFromConnackV3 maps an MQTT 3.1.1 CONNACK return code to a reason
// code, the inverse of ConnackV3. ok is false for codes above 5.
func ReasonFromConnackV3(rc byte) (c ReasonCode, ok bool) {
	switch rc {
	case ConnackAccepted:
		return CodeSuccess, true
	case ConnackBadProtocolVersion:
		return ErrUnsupportedProtocolVersion, true
	case ConnackIdentifierRejected:
		return ErrClientIDNotValid, true
	case ConnackServerUnavailable:
		return ErrServerUnavailable, true
	case ConnackBadUsernameOrPassword:
		return ErrBadUsernameOrPassword, true
	case ConnackNotAuthorized:
		return ErrNotAuthorized, true
	}
	return 0, false
}

// Error is a decode or encode failure with detail. It unwraps to its
// ReasonCode, so errors.Is(err, ErrMalformed) and errors.As(err, &code) work.
type Error struct {
	Code   ReasonCode
	Packet Type   // the packet being decoded or encoded
	Detail string // what was wrong, e.g. "topic name contains a wildcard"
}

func (e *Error) Error() string {
	return "packet: " + e.Packet.String() + ": " + reasonNames[e.Code] + ": " + e.Detail
}

// Unwrap returns the reason code.
func (e *Error) Unwrap() error { return e.Code }

func errorf(code ReasonCode, t Type, detail string) error {
	return &Error{Code: code, Packet: t, Detail: detail}
}

// Reason codes each packet type may carry (MQTT 5.0 section 2.4 and each
// packet's reason code table). A code outside its set is a protocol error.
var (
	connackReasons = reasonSet(0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A,
		0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F)
	pubackReasons     = reasonSet(0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99) // PUBACK, PUBREC
	pubrelReasons     = reasonSet(0x00, 0x92)                                           // PUBREL, PUBCOMP
	subackReasons     = reasonSet(0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2)
	subackV3Reasons   = reasonSet(0x00, 0x01, 0x02, 0x80)
	unsubackReasons   = reasonSet(0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91)
	disconnectReasons = reasonSet(0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F,
		0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2)
	authReasons = reasonSet(0x00, 0x18, 0x19)
)

// codeSet is a set of reason codes, one bit per code.
type codeSet [4]uint64

func reasonSet(codes ...ReasonCode) codeSet {
	var s codeSet
	for _, c := range codes {
		s[c>>6] |= 1 << (c & 63)
	}
	return s
}

func (s *codeSet) has(c ReasonCode) bool { return s[c>>6]&(1<<(c&63)) != 0 }
