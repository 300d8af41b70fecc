package shard

import (
	"bytes"
	"testing"

	"berth.dev/broker/packet"
)

// A CONNECT larger than MaxPacketSize (on a node, the tenant's message
// size quota) is still read: a small quota must not lock out a device
// whose token is larger than it, and a will over the quota is refused
// with CONNACK 0x95 rather than a silent close.
func TestConnectLargerThanMaxPacketSize(t *testing.T) {
	t.Parallel()
	q := &willQuota{maxSize: 64}
	b := startBroker(t, Options{MaxPacketSize: 64}, ConnInfo{Limiter: q})
	token := bytes.Repeat([]byte("t"), 600) // a credential's token is hundreds of bytes

	c := dialRaw(t, b.addr, packet.Version5)
	cp := &packet.Connect{ClientID: []byte("dev"), CleanStart: true, UsernameFlag: true, Username: []byte("crd"),
		PasswordFlag: true, Password: token}
	if ack := c.connect(cp); ack.Reason != packet.CodeSuccess {
		t.Fatalf("CONNECT of %d bytes with MaxPacketSize 64: CONNACK %v, want success", len(token), ack.Reason)
	}
	c.send(&packet.Disconnect{})

	for _, version := range []byte{packet.Version5, packet.Version311} {
		c := dialRaw(t, b.addr, version)
		cp := willConnect("big", version, 0, 0)
		cp.UsernameFlag, cp.Username, cp.PasswordFlag, cp.Password = true, []byte("crd"), true, token
		cp.WillPayload = bytes.Repeat([]byte("w"), 65)
		want := packet.ErrPacketTooLarge
		if version == packet.Version311 {
			want = packet.ErrServerUnavailable // 3.1.1 has no Packet too large
		}
		if ack := c.connect(cp); ack.Reason != want {
			t.Fatalf("version %d: will of 65 bytes over a quota of 64: CONNACK %v, want %v", version, ack.Reason, want)
		}
		c.expectClosed()
	}
}
