package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// brokerKind names how to start one broker under test.
type brokerKind struct {
	name string
	// args returns the command line for a broker listening on addr; dir is a
	// private temporary directory for its config and data.
	args func(bin, addr, dir string) ([]string, error)
}

// kinds are the brokers make bench knows, Berth first: ratios are Berth
// over each peer.
var kinds = map[string]brokerKind{
	"berth": {name: "berth", args: func(bin, addr, dir string) ([]string, error) {
		return []string{filepath.Join(bin, "broker"), "-listen", addr, "-allow-anonymous"}, nil
	}},
	"mosquitto": {name: "mosquitto", args: func(_, addr, dir string) ([]string, error) {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		// set_tcp_nodelay: without it Nagle holds back small PUBACKs and
		// deliveries and mosquitto's latency is the kernel's, not its own.
		// max_queued_messages raises the per-client queue to mochi's and
		// Berth's order, so a fan-out burst is not dropped at 1000.
		conf := fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\nmax_connections -1\n"+
			"set_tcp_nodelay true\nmax_queued_messages 8192\npersistence false\nlog_dest stderr\nlog_type error\nlog_type warning\n", port)
		path := filepath.Join(dir, "mosquitto.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		return []string{mosquittoBin(), "-c", path}, nil
	}},
	"mochi": {name: "mochi", args: func(bin, addr, _ string) ([]string, error) {
		return []string{filepath.Join(bin, "mochi"), "-listen", addr}, nil
	}},
	// NATS speaks MQTT 3.1.1 through JetStream (its MQTT sessions and QoS
	// 1 live in streams, so it needs a store even for QoS 0); its own
	// client port is a random one on loopback.
	"nats": {name: "nats", args: func(_, addr, dir string) ([]string, error) {
		conf := fmt.Sprintf("server_name: bench\nlisten: 127.0.0.1:-1\njetstream { store_dir: %q }\nmqtt { listen: %q }\n",
			filepath.Join(dir, "jetstream"), addr)
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		return []string{natsBin(), "-c", path}, nil
	}},
}

// natsBin is the Debian package's path, or whatever PATH finds.
func natsBin() string {
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	return "nats-server"
}

// withFsync returns kind, for Berth with a policy, started with -data in
// its private directory and -fsync policy: QoS 1/2 go through the message
// log as on a node, so a comparison with a node behind the gateway is like
// with like. Other kinds, or an empty policy, are returned as they are.
func withFsync(kind brokerKind, policy string) brokerKind {
	if kind.name != "berth" || policy == "" {
		return kind
	}
	args := kind.args
	kind.args = func(bin, addr, dir string) ([]string, error) {
		a, err := args(bin, addr, dir)
		if err != nil {
			return nil, err
		}
		return append(a, "-data", filepath.Join(dir, "data"), "-fsync", policy), nil
	}
	return kind
}

// mosquittoBin is the Debian package's path, or whatever PATH finds.
func mosquittoBin() string {
	if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
		return "/usr/sbin/mosquitto"
	}
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p
	}
	return "mosquitto"
}

// process is one running broker.
type process struct {
	kind   string
	addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

// startBroker starts a fresh broker of kind on a free loopback port and
// waits until it accepts connections.
func startBroker(kind brokerKind, bin, dir string) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args, err := kind.args(bin, addr, dir)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, kind.name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", kind.name, err)
	}
	p := &process{kind: kind.name, addr: addr, cmd: cmd, exited: make(chan struct{}), log: logf}
	go func() { cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			logf.Close()
			return nil, fmt.Errorf("%s exited before listening on %s (log %s)", kind.name, addr, logf.Name())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return p, nil
		}
		time.Sleep(20 * time.Millisecond) // polling for the port, with a deadline
	}
	p.stop()
	return nil, fmt.Errorf("%s not listening on %s after 15s", kind.name, addr)
}

// stop sends SIGTERM, waits up to 5 s, then kills. It reports whether the
// broker was still running (it should be: a crash is a finding).
func (p *process) stop() (wasRunning bool) {
	select {
	case <-p.exited:
		p.log.Close()
		return false
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
	p.log.Close()
	return true
}

// usage is what /proc says about a process.
type usage struct {
	CPUSeconds float64 `json:"cpu_seconds"`  // user + system
	RSSKiB     int64   `json:"rss_kib"`      // VmRSS
	PeakRSSKiB int64   `json:"peak_rss_kib"` // VmHWM
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat;
// it is 100 on every Linux architecture Go supports.
const clockTicks = 100

// readUsage reads /proc/PID/stat and /proc/PID/status.
func readUsage(pid int) (usage, error) {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	if u.CPUSeconds, err = parseStatCPU(string(stat)); err != nil {
		return u, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	u.RSSKiB = statusKiB(string(status), "VmRSS:")
	u.PeakRSSKiB = statusKiB(string(status), "VmHWM:")
	return u, nil
}

// parseStatCPU returns utime + stime (fields 14 and 15) in seconds. The
// command name (field 2) may hold spaces, so fields count from its ')'.
func parseStatCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("bench: malformed /proc stat")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc stat")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("bench: /proc stat: %w", err)
	}
	return float64(ut+st) / clockTicks, nil
}

// statusKiB returns the kB value of a /proc/PID/status line, or 0.
func statusKiB(status, key string) int64 {
	for line := range strings.SplitSeq(status, "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
