// Command mochi is the mochi-mqtt peer broker for Berth's side-by-side
// benchmark (make bench). It serves plain MQTT on one TCP address, admits
// every client (the benchmark runs on loopback only), logs warnings and
// errors to stderr, and stops on SIGINT or SIGTERM.
//
//	mochi -listen 127.0.0.1:18830
//
// It uses mochi-mqtt's default capabilities (Receive Maximum 1024, 8192
// pending writes per client, unlimited clients), so the comparison is
// against the library as its users get it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mochi:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mochi", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:1883", "TCP address to serve MQTT on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, *listen, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// serve runs a mochi-mqtt server on listen until ctx ends.
func serve(ctx context.Context, listen string, log *slog.Logger) error {
	srv := mqtt.New(&mqtt.Options{Logger: log})
	if err := srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return fmt.Errorf("add allow hook: %w", err)
	}
	if err := srv.AddListener(listeners.NewTCP(listeners.Config{ID: "tcp", Address: listen})); err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }() // returns once the listeners run
	select {
	case err := <-errc:
		if err != nil {
			srv.Close()
			return fmt.Errorf("serve: %w", err)
		}
		<-ctx.Done()
	case <-ctx.Done():
	}
	return srv.Close()
}
