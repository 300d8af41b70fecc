package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"berth.dev/broker/internal/memtrim"
)

// startMemory starts what the broker does about its own memory, until ctx
// ends: the Trimmer (-mem-return-every; docs/idle-connections.md) and the
// SIGUSR1 report (memory classes to the log, and a heap profile to
// -heap-profile-dir if set).
func startMemory(ctx context.Context, cfg Config, log *slog.Logger) {
	if cfg.MemReturnEvery > 0 {
		tr := memtrim.New(memtrim.Config{Every: cfg.MemReturnEvery, Logger: log})
		go tr.Run(ctx)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				reportMemory(log, cfg.HeapProfileDir)
			}
		}
	}()
}

// reportMemory logs the runtime's memory classes and the process's RSS.
// With dir set it then collects (so that the profile and the second
// report show the live heap as of now, and the difference is the garbage),
// writes the heap profile there (heap-<unix ms>.pb.gz) and logs the classes
// again.
func reportMemory(log *slog.Logger, dir string) {
	log.Info("memory", memoryAttrs()...)
	if dir == "" {
		return
	}
	runtime.GC()
	name := filepath.Join(dir, fmt.Sprintf("heap-%d.pb.gz", time.Now().UnixMilli()))
	if err := writeHeapProfile(name); err != nil {
		log.Warn("heap profile", "err", err)
		return
	}
	log.Info("memory after a collection", append(memoryAttrs(), "heap_profile", name)...)
}

func memoryAttrs() []any {
	attrs := memtrim.Classes()
	if rss, hwm, err := procRSS(); err == nil {
		attrs = append(attrs, "vm_rss_bytes", rss, "vm_hwm_bytes", hwm)
	}
	return attrs
}

func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// procRSS reads VmRSS and VmHWM from /proc/self/status, in bytes.
func procRSS() (rss, hwm uint64, err error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb uint64
		if n, _ := fmt.Sscanf(line, "VmRSS: %d kB", &kb); n == 1 {
			rss = kb << 10
		} else if n, _ := fmt.Sscanf(line, "VmHWM: %d kB", &kb); n == 1 {
			hwm = kb << 10
		}
	}
	return rss, hwm, nil
}
