package packet_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"

	"berth.dev/broker/packet"
)

// A PUBLISH is decoded once from the publisher and fanned out: each
// subscriber gets its own small header (here with its packet identifier)
// and shares the payload bytes.
func Example_fanOut() {
	in := []byte{0x32, 0x0a, 0x00, 0x03, 'a', '/', 'b', 0x00, 0x01, 'h', 'i', '!'}
	r := packet.NewReader(bytes.NewReader(in), 4096)
	fh, body, err := r.ReadPacket(1 << 20)
	if err != nil {
		panic(err)
	}
	var p packet.Publish
	if err := p.Decode(packet.Version311, fh, body); err != nil {
		panic(err)
	}
	scratch := make([]byte, 0, 64)
	for _, id := range []uint16{7, 8} {
		p.PacketID = 0 // stamped below
		hdr, err := p.AppendHeader(scratch[:0], packet.Version311)
		if err != nil {
			panic(err)
		}
		packet.SetPacketID(hdr, id)
		bufs := net.Buffers{hdr, p.Payload} // conn.Write via writev
		var out bytes.Buffer
		bufs.WriteTo(&out)
		fmt.Printf("% x\n", out.Bytes())
	}
	// Output:
	// 32 0a 00 03 61 2f 62 00 07 68 69 21
	// 32 0a 00 03 61 2f 62 00 08 68 69 21
}

// Decoding failures are reason codes, ready for a CONNACK or DISCONNECT.
func ExampleReasonCode() {
	var p packet.Publish
	err := p.Decode(packet.Version5, packet.FixedHeader{Type: packet.TypePublish, Remaining: 4},
		[]byte{0x00, 0x01, '#', 0x00})
	var code packet.ReasonCode
	errors.As(err, &code)
	fmt.Println(err)
	fmt.Printf("0x%02x, 3.1.1 CONNACK %d\n", byte(code), code.ConnackV3())
	// Output:
	// packet: PUBLISH: topic name invalid: wildcard in topic name
	// 0x90, 3.1.1 CONNACK 3
}
