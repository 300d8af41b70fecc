package packet

import (
	"bytes"
	"testing"

	paho5 "github.com/eclipse/paho.golang/packets"
	paho3 "github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/google/go-cmp/cmp"
)

// TestPahoRoundTrip sends every table packet through the packet codecs of
// the Eclipse Paho clients (paho.golang for MQTT 5, paho.mqtt.golang for
// 3.1.1): our bytes are parsed by Paho, Paho writes them back, and our
// decoder must get the table's struct from Paho's bytes.
func TestPahoRoundTrip(t *testing.T) {
	// What Paho cannot represent, so the comparison is adjusted.
	lossy := map[string]func(want codec) codec{
		// paho.golang keeps a single subscription identifier per PUBLISH.
		"PUBLISH 5 QoS 1 all properties": func(w codec) codec {
			p := *w.(*Publish)
			p.Props.SubscriptionIDs = p.Props.SubscriptionIDs[len(p.Props.SubscriptionIDs)-1:]
			return &p
		},
		// paho.golang writes the payload format indicator only for PUBLISH,
		// so it drops it from will properties.
		"CONNECT 5 properties will": func(w codec) codec {
			c := *w.(*Connect)
			c.WillProps.Has &^= Mask(PropPayloadFormat)
			c.WillProps.PayloadFormat = 0
			return &c
		},
	}
	for _, tc := range goodPackets {
		if tc.version == Version31 {
			continue // neither Paho codec speaks "MQIsdp"
		}
		t.Run(tc.name, func(t *testing.T) {
			ours, err := tc.want.Append(nil, encodeVersion(tc.want, tc.version))
			if err != nil {
				t.Fatal(err)
			}
			var theirs bytes.Buffer
			if tc.version == Version5 {
				cp, err := paho5.ReadPacket(bytes.NewReader(ours))
				if err != nil {
					t.Fatalf("paho.golang cannot read % x: %v", ours, err)
				}
				if _, err := cp.WriteTo(&theirs); err != nil {
					t.Fatal(err)
				}
			} else {
				cp, err := paho3.ReadPacket(bytes.NewReader(ours))
				if err != nil {
					t.Fatalf("paho.mqtt.golang cannot read % x: %v", ours, err)
				}
				if err := cp.Write(&theirs); err != nil {
					t.Fatal(err)
				}
			}
			got, err := decodeInto(nil, tc.version, theirs.Bytes())
			if err != nil {
				t.Fatalf("decoding Paho's % x: %v", theirs.Bytes(), err)
			}
			want := tc.want
			if adjust, ok := lossy[tc.name]; ok {
				want = adjust(want)
			}
			if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
				t.Errorf("Paho's bytes % x decode differently (-want +got):\n%s", theirs.Bytes(), diff)
			}
		})
	}
}
