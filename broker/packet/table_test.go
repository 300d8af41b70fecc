package packet

import (
	"encoding/hex"
	"strings"
)

// mustHex decodes an annotated hex dump: "//" starts a comment that runs to
// the end of the line; whitespace is ignored.
func mustHex(s string) []byte {
	var sb strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		sb.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(sb.String())
	if err != nil {
		panic("bad hex in table: " + err.Error())
	}
	return b
}

func b(s string) []byte { return []byte(s) }

// codec is what every packet struct implements.
type codec interface {
	Decode(version byte, fh FixedHeader, body []byte) error
	Append(dst []byte, version byte) ([]byte, error)
}

// newCodec returns an empty struct for packet type t.
func newCodec(t Type) codec {
	switch t {
	case TypeConnect:
		return &Connect{}
	case TypeConnack:
		return &Connack{}
	case TypePublish:
		return &Publish{}
	case TypePuback, TypePubrec, TypePubrel, TypePubcomp:
		return &Ack{}
	case TypeSubscribe:
		return &Subscribe{}
	case TypeSuback:
		return &Suback{}
	case TypeUnsubscribe:
		return &Unsubscribe{}
	case TypeUnsuback:
		return &Unsuback{}
	case TypePingreq, TypePingresp:
		return &Ping{}
	case TypeDisconnect:
		return &Disconnect{}
	case TypeAuth:
		return &Auth{}
	}
	return nil
}

// decodeInto parses one whole packet from raw into dst (or a new struct
// when dst is nil or of another type).
func decodeInto(dst codec, version byte, raw []byte) (codec, error) {
	fh, n, err := ParseFixedHeader(raw)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, ErrMalformed
	}
	fresh := newCodec(fh.Type)
	if dst == nil || fresh == nil || !sameType(dst, fresh) {
		dst = fresh
	}
	return dst, dst.Decode(version, fh, raw[n:])
}

func sameType(a, b codec) bool {
	switch a.(type) {
	case *Connect:
		_, ok := b.(*Connect)
		return ok
	case *Connack:
		_, ok := b.(*Connack)
		return ok
	case *Publish:
		_, ok := b.(*Publish)
		return ok
	case *Ack:
		_, ok := b.(*Ack)
		return ok
	case *Subscribe:
		_, ok := b.(*Subscribe)
		return ok
	case *Suback:
		_, ok := b.(*Suback)
		return ok
	case *Unsubscribe:
		_, ok := b.(*Unsubscribe)
		return ok
	case *Unsuback:
		_, ok := b.(*Unsuback)
		return ok
	case *Ping:
		_, ok := b.(*Ping)
		return ok
	case *Disconnect:
		_, ok := b.(*Disconnect)
		return ok
	case *Auth:
		_, ok := b.(*Auth)
		return ok
	}
	return false
}

// encodeVersion is the version to re-encode a decoded packet with: CONNECT
// carries its own.
func encodeVersion(p codec, version byte) byte {
	if c, ok := p.(*Connect); ok {
		return c.Version
	}
	return version
}

type goodCase struct {
	name    string
	version byte
	raw     string // annotated hex
	want    codec
}

// reencoded holds what Append writes for the table cases whose canonical
// encoding is not the decoded bytes.
var reencoded = map[string]string{
	"DISCONNECT 5 short form": `
		e0 01  // DISCONNECT, remaining length 1
		00     // reason: normal disconnection (always written, for paho.golang)`,
}

var goodPackets = []goodCase{
	{"CONNECT 3.1.1 minimal", Version311, `
		10 10              // CONNECT, remaining length 16
		00 04 4d 51 54 54  // protocol name "MQTT"
		04                 // protocol level 4
		02                 // flags: clean session
		00 3c              // keep alive 60 s
		00 04 63 6c 69 64  // client id "clid"`,
		&Connect{ProtocolName: b("MQTT"), Version: 4, CleanStart: true, KeepAlive: 60, ClientID: b("clid")}},
	{"CONNECT 3.1 will user password", Version31, `
		10 20                    // CONNECT, remaining length 32
		00 06 4d 51 49 73 64 70  // protocol name "MQIsdp"
		03                       // protocol level 3
		ee                       // flags: user, password, will retain, will QoS 1, will, clean
		00 0a                    // keep alive 10 s
		00 02 63 31              // client id "c1"
		00 03 61 2f 62           // will topic "a/b"
		00 02 68 69              // will payload "hi"
		00 01 75                 // user name "u"
		00 02 70 77              // password "pw"`,
		&Connect{ProtocolName: b("MQIsdp"), Version: 3, CleanStart: true, KeepAlive: 10, ClientID: b("c1"),
			WillFlag: true, WillQoS: 1, WillRetain: true, WillTopic: b("a/b"), WillPayload: b("hi"),
			UsernameFlag: true, PasswordFlag: true, Username: b("u"), Password: b("pw")}},
	{"CONNECT 5 properties will", Version5, `
		10 36                 // CONNECT, remaining length 54
		00 04 4d 51 54 54     // protocol name "MQTT"
		05                    // protocol level 5
		c6                    // flags: user, password, will, clean start
		00 1e                 // keep alive 30 s
		11                    // property length 17
		11 00 00 0e 10        //   session expiry interval 3600
		17 01                 //   request problem information 1
		21 00 14              //   receive maximum 20
		26 00 01 6b 00 01 76  //   user property k=v
		00 00                 // client id "" (server assigns one)
		07                    // will property length 7
		01 01                 //   payload format indicator 1 (UTF-8)
		18 00 00 00 05        //   will delay interval 5
		00 01 74              // will topic "t"
		00 00                 // will payload, empty
		00 04 75 73 65 72     // user name "user"
		00 03 01 02 03        // password, binary`,
		&Connect{ProtocolName: b("MQTT"), Version: 5, CleanStart: true, KeepAlive: 30, ClientID: b(""),
			Props: Properties{Has: maskOf(PropSessionExpiry, PropRequestProblemInfo, PropReceiveMaximum, PropUserProperty),
				SessionExpiry: 3600, RequestProblemInfo: 1, ReceiveMaximum: 20,
				UserProperties: []UserProperty{{b("k"), b("v")}}},
			WillFlag: true, WillTopic: b("t"), WillPayload: b(""),
			WillProps:    Properties{Has: maskOf(PropPayloadFormat, PropWillDelay), PayloadFormat: 1, WillDelay: 5},
			UsernameFlag: true, PasswordFlag: true, Username: b("user"), Password: []byte{1, 2, 3}}},
	{"CONNACK 3.1.1 session present", Version311, `
		20 02  // CONNACK, remaining length 2
		01     // session present
		00     // return code 0: accepted`,
		&Connack{SessionPresent: true}},
	{"CONNACK 3.1.1 not authorized", Version311, `
		20 02  // CONNACK
		00     // no session
		05     // return code 5: not authorized`,
		&Connack{Reason: ErrNotAuthorized}},
	{"CONNACK 5 properties", Version5, `
		20 26                  // CONNACK, remaining length 38
		00                     // no session
		00                     // reason: success
		23                     // property length 35
		11 00 00 00 78         //   session expiry interval 120
		12 00 03 61 62 63      //   assigned client id "abc"
		13 00 3c               //   server keep alive 60
		21 00 0a               //   receive maximum 10
		22 00 05               //   topic alias maximum 5
		24 01                  //   maximum QoS 1
		25 00                  //   retain available 0
		27 00 01 00 00         //   maximum packet size 65536
		28 01                  //   wildcard subscription available
		29 00                  //   subscription identifiers available 0
		2a 01                  //   shared subscription available`,
		&Connack{Props: Properties{Has: maskOf(PropSessionExpiry, PropAssignedClientID, PropServerKeepAlive,
			PropReceiveMaximum, PropTopicAliasMaximum, PropMaximumQoS, PropRetainAvailable, PropMaximumPacketSize,
			PropWildcardSubAvailable, PropSubIDAvailable, PropSharedSubAvailable),
			SessionExpiry: 120, AssignedClientID: b("abc"), ServerKeepAlive: 60, ReceiveMaximum: 10,
			TopicAliasMaximum: 5, MaximumQoS: 1, MaximumPacketSize: 65536, WildcardSubAvailable: 1,
			SharedSubAvailable: 1}}},
	{"CONNACK 5 refused", Version5, `
		20 03  // CONNACK, remaining length 3
		00     // no session
		87     // reason: not authorized
		00     // property length 0`,
		&Connack{Reason: ErrNotAuthorized}},
	{"PUBLISH 3.1.1 QoS 0", Version311, `
		30 0a           // PUBLISH QoS 0, remaining length 10
		00 03 61 2f 62  // topic "a/b"
		68 65 6c 6c 6f  // payload "hello"`,
		&Publish{Topic: b("a/b"), Payload: b("hello")}},
	{"PUBLISH 3.1 QoS 1 dup retain", Version31, `
		3b 0a           // PUBLISH DUP, QoS 1, RETAIN, remaining length 10
		00 03 61 2f 62  // topic "a/b"
		00 07           // packet id 7
		68 69 21        // payload "hi!"`,
		&Publish{Dup: true, QoS: 1, Retain: true, Topic: b("a/b"), PacketID: 7, Payload: b("hi!")}},
	{"PUBLISH 3.1.1 QoS 2", Version311, `
		34 07     // PUBLISH QoS 2, remaining length 7
		00 01 74  // topic "t"
		00 02     // packet id 2
		78 79     // payload "xy"`,
		&Publish{QoS: 2, Topic: b("t"), PacketID: 2, Payload: b("xy")}},
	{"PUBLISH 5 QoS 1 all properties", Version5, `
		32 37                  // PUBLISH QoS 1, remaining length 55
		00 03 61 2f 62         // topic "a/b"
		00 0a                  // packet id 10
		2d                     // property length 45
		01 01                  //   payload format indicator 1
		02 00 00 00 3c         //   message expiry interval 60
		03 00 04 74 65 78 74   //   content type "text"
		08 00 01 72            //   response topic "r"
		09 00 02 ca fe         //   correlation data
		0b 05                  //   subscription identifier 5
		0b 80 01               //   subscription identifier 128 (2-byte varint)
		23 00 07               //   topic alias 7
		26 00 01 61 00 01 62   //   user property a=b
		26 00 01 61 00 01 63   //   user property a=c (may repeat)
		7b 7d                  // payload "{}"`,
		&Publish{QoS: 1, Topic: b("a/b"), PacketID: 10, Payload: b("{}"), Props: Properties{
			Has: maskOf(PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
				PropCorrelationData, PropSubscriptionID, PropTopicAlias, PropUserProperty),
			PayloadFormat: 1, MessageExpiry: 60, ContentType: b("text"), ResponseTopic: b("r"),
			CorrelationData: []byte{0xca, 0xfe}, SubscriptionIDs: []uint32{5, 128}, TopicAlias: 7,
			UserProperties: []UserProperty{{b("a"), b("b")}, {b("a"), b("c")}}}}},
	{"PUBLISH 5 topic alias only", Version5, `
		30 06     // PUBLISH QoS 0, remaining length 6
		00 00     // topic "" (the alias stands in)
		03        // property length 3
		23 00 01  //   topic alias 1
		           // empty payload`,
		&Publish{Topic: b(""), Payload: b(""), Props: Properties{Has: maskOf(PropTopicAlias), TopicAlias: 1}}},
	{"PUBACK 3.1.1", Version311, `40 02 00 0a // PUBACK, packet id 10`, &Ack{Type: TypePuback, PacketID: 10}},
	{"PUBREC 3.1.1", Version311, `50 02 00 0b // PUBREC, packet id 11`, &Ack{Type: TypePubrec, PacketID: 11}},
	{"PUBREL 3.1.1", Version311, `62 02 00 0c // PUBREL (flags 0010), packet id 12`, &Ack{Type: TypePubrel, PacketID: 12}},
	{"PUBCOMP 3.1.1", Version311, `70 02 00 0d // PUBCOMP, packet id 13`, &Ack{Type: TypePubcomp, PacketID: 13}},
	{"PUBACK 5 short form", Version5, `40 02 00 0a // PUBACK, packet id 10, reason omitted = success`,
		&Ack{Type: TypePuback, PacketID: 10}},
	{"PUBACK 5 reason", Version5, `
		40 03  // PUBACK, remaining length 3
		00 0a  // packet id 10
		10     // reason: no matching subscribers`,
		&Ack{Type: TypePuback, PacketID: 10, Reason: CodeNoMatchingSubscribers}},
	{"PUBREC 5 reason string", Version5, `
		50 0a              // PUBREC, remaining length 10
		00 0b              // packet id 11
		80                 // reason: unspecified error
		06                 // property length 6
		1f 00 03 62 61 64  //   reason string "bad"`,
		&Ack{Type: TypePubrec, PacketID: 11, Reason: ErrUnspecified,
			Props: Properties{Has: maskOf(PropReasonString), ReasonString: b("bad")}}},
	{"PUBREL 5 not found", Version5, `
		62 03  // PUBREL, remaining length 3
		00 0c  // packet id 12
		92     // reason: packet identifier not found`,
		&Ack{Type: TypePubrel, PacketID: 12, Reason: ErrPacketIDNotFound}},
	{"PUBCOMP 5 user property", Version5, `
		70 0b                 // PUBCOMP, remaining length 11
		00 0d                 // packet id 13
		00                    // reason: success
		07                    // property length 7
		26 00 01 6b 00 01 76  //   user property k=v`,
		&Ack{Type: TypePubcomp, PacketID: 13,
			Props: Properties{Has: maskOf(PropUserProperty), UserProperties: []UserProperty{{b("k"), b("v")}}}}},
	{"SUBSCRIBE 3.1.1", Version311, `
		82 0c           // SUBSCRIBE (flags 0010), remaining length 12
		00 01           // packet id 1
		00 03 61 2f 23  // filter "a/#"
		01              //   QoS 1
		00 01 62        // filter "b"
		02              //   QoS 2`,
		&Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: b("a/#"), QoS: 1}, {Filter: b("b"), QoS: 2}}}},
	{"SUBSCRIBE 5 options", Version5, `
		82 0f           // SUBSCRIBE, remaining length 15
		00 02           // packet id 2
		02              // property length 2
		0b 07           //   subscription identifier 7
		00 03 61 2f 2b  // filter "a/+"
		2d              //   retain handling 2, retain as published, no local, QoS 1
		00 01 63        // filter "c"
		10              //   retain handling 1, QoS 0`,
		&Subscribe{PacketID: 2, Props: Properties{Has: maskOf(PropSubscriptionID), SubscriptionIDs: []uint32{7}},
			Subscriptions: []Subscription{
				{Filter: b("a/+"), QoS: 1, NoLocal: true, RetainAsPublished: true, RetainHandling: 2},
				{Filter: b("c"), RetainHandling: 1}}}},
	{"SUBACK 3.1.1", Version311, `
		90 05     // SUBACK, remaining length 5
		00 01     // packet id 1
		01 02 80  // granted QoS 1, granted QoS 2, failure`,
		&Suback{PacketID: 1, Reasons: []ReasonCode{CodeGrantedQoS1, CodeGrantedQoS2, ErrUnspecified}}},
	{"SUBACK 5", Version5, `
		90 0b           // SUBACK, remaining length 11
		00 02           // packet id 2
		05              // property length 5
		1f 00 02 6f 6b  //   reason string "ok"
		00 01 a2        // granted QoS 0, granted QoS 1, wildcard subscriptions not supported`,
		&Suback{PacketID: 2, Props: Properties{Has: maskOf(PropReasonString), ReasonString: b("ok")},
			Reasons: []ReasonCode{CodeGrantedQoS0, CodeGrantedQoS1, ErrWildcardSubsNotSupported}}},
	{"UNSUBSCRIBE 3.1.1", Version311, `
		a2 0a           // UNSUBSCRIBE (flags 0010), remaining length 10
		00 03           // packet id 3
		00 03 61 2f 62  // filter "a/b"
		00 01 63        // filter "c"`,
		&Unsubscribe{PacketID: 3, Filters: [][]byte{b("a/b"), b("c")}}},
	{"UNSUBSCRIBE 5", Version5, `
		a2 0d                 // UNSUBSCRIBE, remaining length 13
		00 04                 // packet id 4
		07                    // property length 7
		26 00 01 6b 00 01 76  //   user property k=v
		00 01 61              // filter "a"`,
		&Unsubscribe{PacketID: 4, Filters: [][]byte{b("a")},
			Props: Properties{Has: maskOf(PropUserProperty), UserProperties: []UserProperty{{b("k"), b("v")}}}}},
	{"UNSUBACK 3.1.1", Version311, `b0 02 00 03 // UNSUBACK, packet id 3`, &Unsuback{PacketID: 3}},
	{"UNSUBACK 5", Version5, `
		b0 05  // UNSUBACK, remaining length 5
		00 04  // packet id 4
		00     // property length 0
		00 11  // success, no subscription existed`,
		&Unsuback{PacketID: 4, Reasons: []ReasonCode{CodeSuccess, CodeNoSubscriptionExisted}}},
	{"PINGREQ 3.1.1", Version311, `c0 00 // PINGREQ`, &Ping{Type: TypePingreq}},
	{"PINGRESP 3.1.1", Version311, `d0 00 // PINGRESP`, &Ping{Type: TypePingresp}},
	{"PINGREQ 5", Version5, `c0 00 // PINGREQ`, &Ping{Type: TypePingreq}},
	{"PINGRESP 5", Version5, `d0 00 // PINGRESP`, &Ping{Type: TypePingresp}},
	{"DISCONNECT 3.1.1", Version311, `e0 00 // DISCONNECT`, &Disconnect{}},
	{"DISCONNECT 5 short form", Version5, `e0 00 // DISCONNECT, reason omitted = normal`, &Disconnect{}},
	{"DISCONNECT 5 with will", Version5, `
		e0 01  // DISCONNECT, remaining length 1
		04     // reason: disconnect with will message`,
		&Disconnect{Reason: CodeDisconnectWithWill}},
	{"DISCONNECT 5 properties", Version5, `
		e0 10           // DISCONNECT, remaining length 16
		8e              // reason: session taken over
		0e              // property length 14
		11 00 00 00 00  //   session expiry interval 0
		1c 00 01 73     //   server reference "s"
		1f 00 02 62 79  //   reason string "by"`,
		&Disconnect{Reason: ErrSessionTakenOver, Props: Properties{
			Has:             maskOf(PropSessionExpiry, PropServerReference, PropReasonString),
			ServerReference: b("s"), ReasonString: b("by")}}},
	{"AUTH 5 short form", Version5, `f0 00 // AUTH, reason omitted = success`, &Auth{}},
	{"AUTH 5 continue", Version5, `
		f0 0f                       // AUTH, remaining length 15
		18                          // reason: continue authentication
		0d                          // property length 13
		15 00 05 53 43 52 41 4d     //   authentication method "SCRAM"
		16 00 02 01 02              //   authentication data`,
		&Auth{Reason: CodeContinueAuthentication, Props: Properties{
			Has:        maskOf(PropAuthMethod, PropAuthData),
			AuthMethod: b("SCRAM"), AuthData: []byte{1, 2}}}},
}

type badCase struct {
	name    string
	version byte
	raw     string
	want    ReasonCode
}

var badPackets = []badCase{
	{"remaining length 5 bytes", Version311, `30 ff ff ff ff 01`, ErrMalformed},
	{"reserved type 0", Version311, `00 00`, ErrMalformed},
	{"PUBACK flags 0001", Version311, `41 02 00 01`, ErrMalformed},
	{"PUBREL flags 0000", Version311, `60 02 00 01`, ErrMalformed},
	{"SUBSCRIBE flags 0000", Version311, `80 06 00 01 00 01 61 00`, ErrMalformed},
	{"UNSUBSCRIBE flags 0000", Version311, `a0 05 00 01 00 01 61`, ErrMalformed},
	{"DISCONNECT flags 0001", Version311, `e1 00`, ErrMalformed},
	{"body shorter than remaining length", Version311, `30 05 00 01`, ErrMalformed},
	{"PUBLISH QoS 3", Version311, `36 05 00 01 61 00 01`, ErrMalformed},
	{"PUBLISH DUP on QoS 0", Version311, `38 03 00 01 61`, ErrMalformed},
	{"PUBLISH topic '#'", Version311, `30 03 00 01 23`, ErrTopicNameInvalid},
	{"PUBLISH topic 'a/+'", Version5, `30 06 00 03 61 2f 2b 00`, ErrTopicNameInvalid},
	{"PUBLISH topic U+0000", Version311, `30 03 00 01 00`, ErrMalformed},
	{"PUBLISH topic bad UTF-8", Version311, `30 04 00 02 c3 28`, ErrMalformed},
	{"PUBLISH topic surrogate", Version311, `30 05 00 03 ed a0 80`, ErrMalformed},
	{"PUBLISH topic runs past end", Version311, `30 03 00 05 61`, ErrMalformed},
	{"PUBLISH QoS 1 packet id 0", Version311, `32 05 00 01 61 00 00`, ErrProtocol},
	{"PUBLISH QoS 1 packet id missing", Version311, `32 04 00 01 61 00`, ErrMalformed},
	{"PUBLISH 3.1.1 empty topic", Version311, `30 02 00 00`, ErrProtocol},
	{"PUBLISH 5 empty topic no alias", Version5, `30 03 00 00 00`, ErrProtocol},
	{"PUBLISH 5 topic alias 0", Version5, `30 07 00 01 61 03 23 00 00`, ErrTopicAliasInvalid},
	{"PUBLISH 5 duplicate payload format", Version5, `30 08 00 01 61 04 01 00 01 00`, ErrProtocol},
	{"PUBLISH 5 session expiry not allowed", Version5, `30 09 00 01 61 05 11 00 00 00 01`, ErrMalformed},
	{"PUBLISH 5 unknown property 0x7f", Version5, `30 06 00 01 61 02 7f 00`, ErrMalformed},
	{"PUBLISH 5 property length past end", Version5, `30 05 00 01 61 05 01`, ErrMalformed},
	{"PUBLISH 5 property value truncated", Version5, `30 07 00 01 61 03 02 00 00`, ErrMalformed},
	{"PUBLISH 5 payload format 2", Version5, `30 06 00 01 61 02 01 02`, ErrProtocol},
	{"PUBLISH 5 subscription id 0", Version5, `30 06 00 01 61 02 0b 00`, ErrProtocol},
	{"PUBLISH 5 user property bad UTF-8", Version5, `30 0b 00 01 61 07 26 00 01 ff 00 01 61`, ErrMalformed},
	{"PUBLISH 5 property length 5-byte varint", Version5, `30 08 00 01 61 ff ff ff ff 01`, ErrMalformed},
	{"PUBLISH 5 response topic wildcard", Version5, `30 08 00 01 61 04 08 00 01 23`, ErrProtocol},
	{"CONNECT reserved flag", Version311, `10 0d 00 04 4d 51 54 54 04 03 00 3c 00 01 63`, ErrMalformed},
	{"CONNECT level 6", Version311, `10 0d 00 04 4d 51 54 54 06 02 00 3c 00 01 63`, ErrUnsupportedProtocolVersion},
	{"CONNECT name MQTX", Version311, `10 0d 00 04 4d 51 54 58 04 02 00 3c 00 01 63`, ErrUnsupportedProtocolVersion},
	{"CONNECT level 3 named MQTT", Version311, `10 0d 00 04 4d 51 54 54 03 02 00 3c 00 01 63`, ErrUnsupportedProtocolVersion},
	{"CONNECT will QoS 3", Version311, `10 0d 00 04 4d 51 54 54 04 1e 00 3c 00 01 63`, ErrMalformed},
	{"CONNECT will retain without will", Version311, `10 0d 00 04 4d 51 54 54 04 22 00 3c 00 01 63`, ErrMalformed},
	{"CONNECT will QoS without will", Version311, `10 0d 00 04 4d 51 54 54 04 0a 00 3c 00 01 63`, ErrMalformed},
	{"CONNECT 3.1.1 password without user", Version311, `10 0d 00 04 4d 51 54 54 04 42 00 3c 00 01 63`, ErrMalformed},
	{"CONNECT 3.1.1 empty id, no clean session", Version311, `10 0c 00 04 4d 51 54 54 04 00 00 3c 00 00`, ErrClientIDNotValid},
	{"CONNECT 3.1 empty id", Version31, `10 0e 00 06 4d 51 49 73 64 70 03 02 00 3c 00 00`, ErrClientIDNotValid},
	{"CONNECT trailing byte", Version311, `10 0e 00 04 4d 51 54 54 04 02 00 3c 00 01 63 ff`, ErrMalformed},
	{"CONNECT user name missing", Version311, `10 0d 00 04 4d 51 54 54 04 82 00 3c 00 01 63`, ErrMalformed},
	{"CONNECT client id bad UTF-8", Version311, `10 0d 00 04 4d 51 54 54 04 02 00 3c 00 01 ff`, ErrMalformed},
	{"CONNECT will topic wildcard", Version311,
		`10 12 00 04 4d 51 54 54 04 06 00 3c 00 01 63 00 01 23 00 00`, ErrTopicNameInvalid},
	{"CONNECT 5 receive maximum 0", Version5, `10 11 00 04 4d 51 54 54 05 02 00 3c 03 21 00 00 00 01 63`, ErrProtocol},
	{"CONNECT 5 auth data without method", Version5, `10 12 00 04 4d 51 54 54 05 02 00 3c 04 16 00 01 01 00 01 63`, ErrProtocol},
	{"CONNECT 5 session expiry twice", Version5,
		`10 18 00 04 4d 51 54 54 05 02 00 3c 0a 11 00 00 00 01 11 00 00 00 02 00 01 63`, ErrProtocol},
	{"CONNECT 5 topic alias not allowed", Version5, `10 11 00 04 4d 51 54 54 05 02 00 3c 03 23 00 01 00 01 63`, ErrMalformed},
	{"CONNECT 5 will property not allowed", Version5,
		`10 17 00 04 4d 51 54 54 05 06 00 3c 00 00 01 63 03 23 00 01 00 01 74 00 00`, ErrMalformed},
	{"CONNECT 5 maximum packet size 0", Version5,
		`10 13 00 04 4d 51 54 54 05 02 00 3c 05 27 00 00 00 00 00 01 63`, ErrProtocol},
	{"SUBSCRIBE no filters", Version311, `82 02 00 01`, ErrProtocol},
	{"SUBSCRIBE packet id 0", Version311, `82 06 00 00 00 01 61 00`, ErrProtocol},
	{"SUBSCRIBE 3.1.1 reserved option bits", Version311, `82 06 00 01 00 01 61 04`, ErrMalformed},
	{"SUBSCRIBE QoS 3", Version311, `82 06 00 01 00 01 61 03`, ErrMalformed},
	{"SUBSCRIBE empty filter", Version311, `82 05 00 01 00 00 00`, ErrTopicFilterInvalid},
	{"SUBSCRIBE options missing", Version311, `82 05 00 01 00 01 61`, ErrMalformed},
	{"SUBSCRIBE 5 reserved option bits", Version5, `82 07 00 01 00 00 01 61 40`, ErrMalformed},
	{"SUBSCRIBE 5 retain handling 3", Version5, `82 07 00 01 00 00 01 61 30`, ErrProtocol},
	{"SUBSCRIBE 5 two subscription ids", Version5, `82 0b 00 01 04 0b 01 0b 02 00 01 61 00`, ErrProtocol},
	{"UNSUBSCRIBE no filters", Version311, `a2 02 00 01`, ErrProtocol},
	{"UNSUBSCRIBE empty filter", Version311, `a2 04 00 01 00 00`, ErrTopicFilterInvalid},
	{"PUBACK 3.1.1 remaining 3", Version311, `40 03 00 01 00`, ErrMalformed},
	{"PUBACK packet id 0", Version311, `40 02 00 00`, ErrProtocol},
	{"PUBACK 5 reason 0x92", Version5, `40 03 00 01 92`, ErrProtocol},
	{"PUBREL 5 reason 0x10", Version5, `62 03 00 01 10`, ErrProtocol},
	{"PUBACK 5 topic alias property", Version5, `40 07 00 01 00 03 23 00 01`, ErrMalformed},
	{"PUBACK 5 reason string twice", Version5, `40 0c 00 01 00 08 1f 00 01 61 1f 00 01 62`, ErrProtocol},
	{"CONNACK reserved flags", Version311, `20 02 02 00`, ErrMalformed},
	{"CONNACK 3.1.1 return code 6", Version311, `20 02 00 06`, ErrProtocol},
	{"CONNACK session present on refusal", Version311, `20 02 01 05`, ErrProtocol},
	{"CONNACK 5 reason 0x10", Version5, `20 03 00 10 00`, ErrProtocol},
	{"CONNACK 5 properties missing", Version5, `20 02 00 00`, ErrMalformed},
	{"SUBACK 3.1.1 reason 0x97", Version311, `90 03 00 01 97`, ErrProtocol},
	{"SUBACK no reasons", Version311, `90 02 00 01`, ErrProtocol},
	{"UNSUBACK 3.1.1 with reasons", Version311, `b0 03 00 01 00`, ErrMalformed},
	{"UNSUBACK 5 reason 0x02", Version5, `b0 04 00 01 00 02`, ErrProtocol},
	{"PINGREQ with body", Version311, `c0 01 00`, ErrMalformed},
	{"DISCONNECT 3.1.1 with body", Version311, `e0 01 00`, ErrMalformed},
	{"DISCONNECT 5 reason 0x01", Version5, `e0 01 01`, ErrProtocol},
	{"DISCONNECT 5 trailing bytes", Version5, `e0 03 00 00 00`, ErrMalformed},
	{"AUTH in 3.1.1", Version311, `f0 00`, ErrProtocol},
	{"AUTH 5 reason 0x80", Version5, `f0 01 80`, ErrProtocol},
	{"AUTH 5 data without method", Version5, `f0 07 18 05 16 00 02 01 02`, ErrProtocol},
	{"remaining length not shortest form", Version311, `c0 80 00`, ErrMalformed},
	{"PUBLISH 5 subscription id not shortest form", Version5, `30 07 00 01 61 03 0b 81 00`, ErrMalformed},
	{"SUBSCRIBE 5 no local on shared subscription", Version5, `
		82 10                            // SUBSCRIBE, remaining length 16
		00 01                            // packet id 1
		00                               // property length 0
		00 0a 24 73 68 61 72 65 2f 67 2f 61  // filter "$share/g/a"
		04                               //   no local, QoS 0`, ErrProtocol},
}
