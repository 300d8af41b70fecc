package shard

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// mosquitto runs a mosquitto client binary against the broker with a
// timeout and returns its standard output.
func mosquitto(t *testing.T, b *testBroker, name string, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/"+name, append([]string{"-h", host, "-p", port}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s %v: %v %s", name, args, err, stderr)
	}
	return string(out)
}

func TestMosquittoClients(t *testing.T) {
	t.Parallel()
	b := startBroker(t, Options{}, ConnInfo{})
	for _, v := range []string{"mqttv311", "mqttv5"} {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			topic := "mosq/" + v
			// Retained first, then a live subscriber that waits for two
			// messages: the retained one and a QoS 2 one.
			mosquitto(t, b, "mosquitto_pub", "-V", v, "-t", topic+"/retained", "-m", "kept", "-r", "-q", "1")
			out := make(chan string, 1)
			go func() {
				out <- mosquittoNoFatal(b, "mosquitto_sub", "-V", v, "-t", topic+"/#", "-q", "2", "-C", "2", "-v", "-W", "8")
			}()
			eventually(t, "subscriber connected", func() bool {
				return b.shard.tree.Len() > 0 && subscribedTo(b, topic+"/#")
			})
			mosquitto(t, b, "mosquitto_pub", "-V", v, "-t", topic+"/live", "-m", "hello", "-q", "2")
			got := strings.Split(strings.TrimSpace(<-out), "\n")
			want := []string{topic + "/retained kept", topic + "/live hello"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("mosquitto_sub printed %q, want %q", got, want)
			}
		})
	}
}

func mosquittoNoFatal(b *testBroker, name string, args ...string) string {
	host, port, _ := net.SplitHostPort(b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/"+name, append([]string{"-h", host, "-p", port}, args...)...).Output()
	if err != nil {
		return "error: " + err.Error() + ": " + string(out)
	}
	return string(out)
}

// subscribedTo reports whether some session holds filter.
func subscribedTo(b *testBroker, filter string) bool {
	s := b.shard
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sess := range s.sessions {
		for _, sub := range s.tree.Subscriptions(sess.id, nil) {
			if sub.Filter.Raw == filter {
				return true
			}
		}
	}
	return false
}
