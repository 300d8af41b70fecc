// Command connflood is the fault suite's connect flood as a process of its
// own (TestFaultConnectFlood runs it in a network namespace and a CPU
// cgroup of the test's). It prints one line when done:
//
//	attempts refused connacked dial-errors dropped wall-ns cpu-ns
//
// where dropped counts the connects whose SYN went unanswered within
// -dial-timeout (dropped by the gateway's kernel SYN filter).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"berth.dev/e2e/internal/flood"
)

func main() {
	fs := flag.NewFlagSet("connflood", flag.ExitOnError)
	cfg := flood.Config{}
	var sources string
	fs.StringVar(&cfg.Addr, "addr", os.Getenv("BERTH_FLOOD_ADDR"), "target host:port (env BERTH_FLOOD_ADDR)")
	fs.StringVar(&sources, "sources", os.Getenv("BERTH_FLOOD_SOURCES"), "comma-separated source IPs, used in turn (env BERTH_FLOOD_SOURCES)")
	fs.IntVar(&cfg.Rate, "rate", 10_000, "attempts a second")
	fs.DurationVar(&cfg.For, "for", 3*time.Second, "how long (at most 1m)")
	fs.IntVar(&cfg.Workers, "workers", 4096, "attempts at once at most (dropped SYNs hold one each for -dial-timeout)")
	fs.DurationVar(&cfg.DialTimeout, "dial-timeout", 200*time.Millisecond, "a connect unanswered this long counts as dropped (keep it under the 1 s SYN retransmission)")
	_ = fs.Parse(os.Args[1:])
	if cfg.Addr == "" || sources == "" || cfg.Rate <= 0 || cfg.Workers <= 0 || cfg.For <= 0 || cfg.For > time.Minute || cfg.DialTimeout <= 0 {
		fmt.Fprintln(os.Stderr, "connflood: need -addr, -sources, a positive -rate, -workers and -dial-timeout, and 0 < -for <= 1m")
		os.Exit(2)
	}
	for _, s := range strings.Split(sources, ",") {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil {
			fmt.Fprintf(os.Stderr, "connflood: -sources: %q is not an IP\n", s)
			os.Exit(2)
		}
		cfg.Sources = append(cfg.Sources, &net.TCPAddr{IP: ip})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var st flood.Stats
	took := flood.Run(ctx, cfg, &st)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Println(st.Attempts.Load(), st.Refused.Load(), st.Connacked.Load(), st.DialErr.Load(), st.Dropped.Load(), int64(took), int64(cpu))
}
