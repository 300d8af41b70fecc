package main

import "fmt"

// reasonNames are the MQTT 5 reason codes (MQTT 5 §2.4) a broker answers
// berthctl's CONNECT, PUBLISH and SUBSCRIBE with, and DISCONNECT sends.
func reasonName(code byte) string {
	switch code {
	case 0x80:
		return "unspecified error"
	case 0x81:
		return "malformed packet"
	case 0x82:
		return "protocol error"
	case 0x83:
		return "implementation specific error"
	case 0x85:
		return "client identifier not valid"
	case 0x86:
		return "bad user name or password"
	case 0x87:
		return "not authorized"
	case 0x88:
		return "server unavailable"
	case 0x89:
		return "server busy"
	case 0x8A:
		return "banned"
	case 0x8B:
		return "server shutting down"
	case 0x8C:
		return "bad authentication method"
	case 0x8D:
		return "keep alive timeout"
	case 0x8E:
		return "session taken over"
	case 0x8F:
		return "topic filter invalid"
	case 0x90:
		return "topic name invalid"
	case 0x93:
		return "receive maximum exceeded"
	case 0x95:
		return "packet too large"
	case 0x97:
		return "quota exceeded"
	case 0x98:
		return "administrative action"
	case 0x99:
		return "payload format invalid"
	case 0x9A:
		return "retain not supported"
	case 0x9B:
		return "QoS not supported"
	case 0x9E:
		return "shared subscriptions not supported"
	case 0xA2:
		return "wildcard subscriptions not supported"
	}
	return "reason code"
}

// reasonHint says what to do about a refusal of op ("publish",
// "subscribe", "connection"), or "".
func reasonHint(op string, code byte) string {
	switch {
	case code == 0x87 && op == "publish":
		return "the credential's publish filters (--pub) do not cover this topic; berthctl credentials lists them"
	case code == 0x87 && op == "subscribe":
		return "the credential's subscribe filters (--sub) do not cover this filter; berthctl credentials lists them"
	case code == 0x97:
		return "a quota or topic rule limit is reached; berthctl quotas and berthctl topics show them"
	case code == 0x95:
		return "over the tenant's max_message_size or a topic rule's; berthctl quotas and berthctl topics show them"
	case code == 0x9A:
		return "a topic rule does not allow retained messages here; publish without --retain"
	case code == 0x98:
		return "the session was ended through the API (berthctl sessions kick, a revoked credential or a deleted tenant)"
	case code == 0x8E:
		return "another connection took over this client id"
	}
	return ""
}

// refusal formats a refusal with code and the server's reason string.
func refusal(op string, code byte, reasonString string) string {
	s := fmt.Sprintf("%s refused: %s (MQTT reason code %#02x)", op, reasonName(code), code)
	if op == "connection" {
		s = fmt.Sprintf("connection closed by the server: %s (MQTT reason code %#02x)", reasonName(code), code)
	}
	if reasonString != "" {
		s += ": " + reasonString
	}
	if h := reasonHint(op, code); h != "" {
		s += "; " + h
	}
	return s
}
