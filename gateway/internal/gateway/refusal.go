package gateway

import "berth.dev/broker/packet"

// refusal is why a CONNECT was refused: the metric label and the reason
// code sent back (MQTT 5 as is, 3.1.1 through ConnackV3). This table is the
// one place where gateway failures become protocol answers.
type refusal struct {
	label string
	code  packet.ReasonCode // 0 means close without a CONNACK
}

var (
	refuseMalformed      = refusal{"malformed", 0}                                               // [MQTT-3.1.4-1] close, no CONNACK in 3.1.1
	refuseMalformedV5    = refusal{"malformed", packet.ErrMalformed}                             // MQTT 5 may say why first
	refuseProtocol       = refusal{"unsupported_protocol", packet.ErrUnsupportedProtocolVersion} // [MQTT-3.1.2-2]
	refuseClientID       = refusal{"client_id_rejected", packet.ErrClientIDNotValid}             // [MQTT-3.1.3-8]
	refuseTooLarge       = refusal{"connect_too_large", 0}                                       // version unknown: no CONNACK
	refuseTimeout        = refusal{"connect_timeout", 0}
	refuseBadCredentials = refusal{"bad_credentials", packet.ErrBadUsernameOrPassword} // 0x86 / 0x04
	refuseRevoked        = refusal{"revoked", packet.ErrNotAuthorized}                 // 0x87 / 0x05
	refuseNoTenant       = refusal{"unknown_tenant", packet.ErrNotAuthorized}          // 0x87 / 0x05
	refuseSNI            = refusal{"sni_mismatch", packet.ErrNotAuthorized}            // 0x87 / 0x05
	refuseOverLimit      = refusal{"over_limit", packet.ErrQuotaExceeded}              // 0x97 / 0x03
	refuseAuthDown       = refusal{"auth_unavailable", packet.ErrServerUnavailable}    // 0x88 / 0x03
	refuseNoRoute        = refusal{"no_route", packet.ErrServerUnavailable}            // 0x88 / 0x03
	refuseLimiterDown    = refusal{"limiter_unavailable", packet.ErrServerUnavailable} // 0x88 / 0x03
	refuseNodeDown       = refusal{"node_unreachable", packet.ErrServerUnavailable}    // 0x88 / 0x03
	refuseNoLeader       = refusal{"no_leader", packet.ErrServerUnavailable}           // 0x88 / 0x03: nodes answered 0x9C/0x9D (leader.go)
	refuseShuttingDown   = refusal{"shutting_down", packet.ErrServerShuttingDown}      // 0x8B / 0x03
	refuseBusy           = refusal{"server_busy", packet.ErrServerBusy}                // 0x89 / 0x03: no handshake slot (handshake.go)
)

// connack encodes the refusal CONNACK for version (nil when the refusal
// sends none). Session present is 0 on a refusal [MQTT-3.2.2-6] (5.0)
// [MQTT-3.2.2-4] (3.1.1).
func (r refusal) connack(version byte) []byte {
	if r.code == 0 {
		return nil
	}
	if version < packet.Version31 || version > packet.Version5 {
		version = packet.Version311
	}
	ack := packet.Connack{Reason: r.code}
	b, err := ack.Append(make([]byte, 0, 8), version)
	if err != nil {
		return nil
	}
	return b
}
