package topic

import (
	"errors"
	"strings"
	"testing"
)

func TestParseFilter(t *testing.T) {
	tests := []struct {
		raw       string
		maxLevels int
		share     string
		path      string
		err       error
	}{
		{raw: "sport/tennis/player1", path: "sport/tennis/player1"},
		{raw: "sport/tennis/player1/#", path: "sport/tennis/player1/#"},
		{raw: "sport/#", path: "sport/#"},
		{raw: "#", path: "#"},
		{raw: "+", path: "+"},
		{raw: "+/tennis/#", path: "+/tennis/#"},
		{raw: "sport/+/player1", path: "sport/+/player1"},
		{raw: "+/+", path: "+/+"},
		{raw: "/+", path: "/+"},
		{raw: "/", path: "/"},
		{raw: "a//b", path: "a//b"},
		{raw: "a/", path: "a/"},
		{raw: "$SYS/#", path: "$SYS/#"},
		{raw: "$share/g1/sport/#", share: "g1", path: "sport/#"},
		{raw: "$share/g1/+", share: "g1", path: "+"},
		{raw: "$share/g1//a", share: "g1", path: "/a"},
		{raw: "$share/g/$SYS/x", share: "g", path: "$SYS/x"},
		// "$shared" is not the share prefix: an ordinary filter.
		{raw: "$shared/g/a", path: "$shared/g/a"},
		{raw: "$share", path: "$share"},
		{raw: "a/b/c", maxLevels: 3, path: "a/b/c"},

		{raw: "", err: ErrEmpty},                              // [MQTT-4.7.3-1]
		{raw: "sport/tennis#", err: ErrMultiLevel},            // [MQTT-4.7.1-2]
		{raw: "sport/tennis/#/ranking", err: ErrMultiLevel},   // [MQTT-4.7.1-2]
		{raw: "#/", err: ErrMultiLevel},                       // not last
		{raw: "##", err: ErrMultiLevel},                       // not alone
		{raw: "sport+", err: ErrSingleLevel},                  // [MQTT-4.7.1-3]
		{raw: "sport/+tennis", err: ErrSingleLevel},           // [MQTT-4.7.1-3]
		{raw: "++", err: ErrSingleLevel},                      // not alone
		{raw: "a/b/c/d", maxLevels: 3, err: ErrTooManyLevels}, // limit
		{raw: "a\x00b", err: ErrInvalidUTF8},                  // [MQTT-4.7.3-2]
		{raw: "a\xffb", err: ErrInvalidUTF8},                  // [MQTT-1.5.4-1]
		{raw: strings.Repeat("a", 65536), err: ErrTooLong},    // string length
		{raw: "$share/", err: ErrShareName},                   // [MQTT-4.8.2-1]
		{raw: "$share//a", err: ErrShareName},                 // [MQTT-4.8.2-1]
		{raw: "$share/g", err: ErrShareName},                  // [MQTT-4.8.2-2]
		{raw: "$share/g+/a", err: ErrShareName},               // [MQTT-4.8.2-2]
		{raw: "$share/g#/a", err: ErrShareName},               // [MQTT-4.8.2-2]
		{raw: "$share/g/", err: ErrEmpty},                     // empty filter part
		{raw: "$share/g/a#", err: ErrMultiLevel},              // filter part checked
	}
	for _, tc := range tests {
		t.Run(tc.raw[:min(len(tc.raw), 40)], func(t *testing.T) {
			f, err := ParseFilter(tc.raw, tc.maxLevels)
			if !errors.Is(err, tc.err) {
				t.Fatalf("ParseFilter(%q) error = %v, want %v", tc.raw, err, tc.err)
			}
			if tc.err != nil {
				return
			}
			if f.Raw != tc.raw || f.ShareName != tc.share || f.Path != tc.path {
				t.Fatalf("ParseFilter(%q) = %+v, want share %q path %q", tc.raw, f, tc.share, tc.path)
			}
			if f.Shared() != (tc.share != "") {
				t.Fatalf("Shared() = %v", f.Shared())
			}
		})
	}
}

func TestValidateTopicName(t *testing.T) {
	tests := []struct {
		name      string
		maxLevels int
		err       error
	}{
		{name: "sport/tennis/player1"},
		{name: "/finance"},
		{name: "a//b"},
		{name: "a/"},
		{name: "/"},
		{name: "$SYS/broker/load"},
		{name: "ünïcödé/τοπικ"},
		{name: "a/b/c", maxLevels: 3},
		{name: "", err: ErrEmpty},
		{name: "sport/+", err: ErrWildcardName},
		{name: "sport/#", err: ErrWildcardName},
		{name: "a+b", err: ErrWildcardName},
		{name: "a\x00", err: ErrInvalidUTF8},
		{name: "a\xc3", err: ErrInvalidUTF8},
		{name: "a/b/c/d", maxLevels: 3, err: ErrTooManyLevels},
		{name: strings.Repeat("/", 200), err: ErrTooManyLevels},
		{name: strings.Repeat("a", 65536), err: ErrTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name[:min(len(tc.name), 40)], func(t *testing.T) {
			if err := ValidateTopicName([]byte(tc.name), tc.maxLevels); !errors.Is(err, tc.err) {
				t.Fatalf("ValidateTopicName(%q) = %v, want %v", tc.name, err, tc.err)
			}
		})
	}
}

func TestValidateTopicNameAllocs(t *testing.T) {
	name := []byte("sport/tennis/player1/ranking")
	if n := testing.AllocsPerRun(100, func() {
		if err := ValidateTopicName(name, 0); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("ValidateTopicName allocates %v times, want 0", n)
	}
}

func TestSendRetainedOnSubscribe(t *testing.T) {
	tests := []struct {
		rh      RetainHandling
		existed bool
		shared  bool
		want    bool
	}{
		{SendRetained, false, false, true},      // [MQTT-3.3.1-9]
		{SendRetained, true, false, true},       // [MQTT-3.3.1-9]
		{SendRetainedIfNew, false, false, true}, // [MQTT-3.3.1-10]
		{SendRetainedIfNew, true, false, false}, // [MQTT-3.3.1-10]
		{NoRetained, false, false, false},       // [MQTT-3.3.1-11]
		{NoRetained, true, false, false},        // [MQTT-3.3.1-11]
		{SendRetained, false, true, false},      // shared: never
		{SendRetainedIfNew, false, true, false}, // shared: never
	}
	for _, tc := range tests {
		o := Options{RetainHandling: tc.rh}
		if got := o.SendRetainedOnSubscribe(tc.existed, tc.shared); got != tc.want {
			t.Errorf("RH %d existed %v shared %v: got %v, want %v", tc.rh, tc.existed, tc.shared, got, tc.want)
		}
	}
}
