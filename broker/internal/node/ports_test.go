package node

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// freePorts are n free 127.0.0.1 addresses for peer listeners, on ports
// the kernel does not hand out by itself (outside its ephemeral range).
// A node killed and started again on its address (cluster.restart) must
// find it free; an ephemeral port may by then be any other socket's (a
// client's dial, a pgx connection, another test's listener on :0).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	lo, hi := portRange()
	var addrs []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for try := 0; len(addrs) < n; try++ {
		if try == 1000 {
			t.Fatalf("no free port in [%d, %d) after %d tries", lo, hi, try)
		}
		port := 0 // no range outside the ephemeral one: the kernel's choice
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken: another
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// portRange is a range of unprivileged ports outside Linux's ephemeral
// range (ip_local_port_range), at least 1000 wide, or [0, 0) when there
// is none (or the range cannot be read).
func portRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err1 := strconv.Atoi(f[0])
	last, err2 := strconv.Atoi(f[1])
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0
	case first-10000 >= 1000:
		return 10000, first
	case 65535-last >= 1000:
		return last + 1, 65536
	}
	return 0, 0
}
