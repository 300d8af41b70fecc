package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/broker/packet"
)

// crashChildEnv makes the test binary run the broker (see TestMain): the
// crash loop kills it with SIGKILL, which it cannot do to itself.
const crashChildEnv = "BERTH_CRASH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		ready := func(tcp, _ net.Addr) { fmt.Printf("ADDR %s\n", tcp) }
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		if err := run(ctx, os.Args[1:], func(string) string { return "" }, ready); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startChild runs the broker in a child process on dataDir with -fsync
// always and returns it and its MQTT address.
func startChild(t *testing.T, dataDir string) (*exec.Cmd, string) {
	t.Helper()
	return startChildWith(t, dataDir, "-fsync", "always")
}

// startChildWith runs the broker in a child process on dataDir with the
// default flags but for extra (and a quiet log) and returns it and its MQTT
// address.
func startChildWith(t *testing.T, dataDir string, extra ...string) (*exec.Cmd, string) {
	t.Helper()
	args := append([]string{"-listen", "127.0.0.1:0", "-allow-anonymous", "-data", dataDir,
		"-log-level", "warn", "-sys-interval", "-1s"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), crashChildEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child address: %v", err)
	}
	return cmd, strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
}

// mqttClient is a minimal MQTT 5 client over the codec.
type mqttClient struct {
	nc  net.Conn
	rd  *packet.Reader
	wmu sync.Mutex
}

func dialMQTT(addr, clientID string, expiry uint32) (*mqttClient, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &mqttClient{nc: nc, rd: packet.NewReader(nc, 4096)}
	cp := &packet.Connect{ClientID: []byte(clientID), CleanStart: false}
	cp.Props.Has.Set(packet.PropSessionExpiry)
	cp.Props.SessionExpiry = expiry
	if err := c.send(cp); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	fh, _, err := c.rd.ReadPacket(0)
	if err != nil || fh.Type != packet.TypeConnack {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: %v %v", fh.Type, err)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return c, nil
}

func (c *mqttClient) send(p interface {
	Append([]byte, byte) ([]byte, error)
}) error {
	b, err := p.Append(nil, packet.Version5)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.nc.Write(b)
	return err
}
