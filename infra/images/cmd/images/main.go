// Command images builds Berth's container images without a Docker daemon:
// one OCI image layout per process under -out (berth-api, berth-gateway,
// berth-node, berth-billing, berth-migrate), static binaries on a base of
// passwd, group and CA certificates, run as uid 65532. The same sources,
// flags and Go toolchain give the same digests. See docs/deploy.md, Images.
//
//	go run ./infra/images/cmd/images -out .run/images -tag 1.2.0 -revision $(git rev-parse HEAD) \
//	    -created $(git log -1 --format=%ct)
//
// (`make images` runs it so.) Every flag also reads an environment
// variable, named in -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"berth.dev/images/internal/build"
	"berth.dev/images/internal/layer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.LookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, lookup func(string) (string, bool)) error {
	// env names each flag's environment fallback.
	env := map[string]string{
		"out":       "BERTH_IMAGES_OUT",
		"tag":       "BERTH_IMAGES_TAG",
		"revision":  "BERTH_IMAGES_REVISION",
		"source":    "BERTH_IMAGES_SOURCE",
		"created":   "SOURCE_DATE_EPOCH",
		"arch":      "BERTH_IMAGES_ARCH",
		"ca-bundle": "BERTH_IMAGES_CA_BUNDLE",
		"images":    "BERTH_IMAGES",
		"root":      "BERTH_IMAGES_ROOT",
	}
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	var (
		out      = fs.String("out", ".run/images", "output directory: one OCI image layout per image, <out>/<name>")
		tag      = fs.String("tag", "dev", "release version: the images' tag and version label, and what each binary's -version prints")
		revision = fs.String("revision", "unknown", "source revision (commit id): the revision label and each binary's -version")
		source   = fs.String("source", "https://berth.dev", "source repository URL: the org.opencontainers.image.source label")
		created  = fs.Int64("created", 0, "Unix seconds stamped on every file, history entry and the config (the commit time for reproducible builds)")
		arch     = fs.String("arch", runtime.GOARCH, "GOARCH of the binaries and the images' platform (linux)")
		caBundle = fs.String("ca-bundle", layer.CABundlePath, "PEM CA certificates copied into the base layer (Debian's ca-certificates)")
		names    = fs.String("images", "", "comma-separated images to build (default: all)")
		root     = fs.String("root", "", "repository root holding go.work (default: found above the working directory)")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: images [flags]\n\nBuilds Berth's OCI images into -out. Images: %s.\n\nFlags (environment fallback in brackets):\n", imageNames())
		fs.VisitAll(func(f *flag.Flag) { f.Usage += " [" + env[f.Name] + "]" })
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := lookup(env[f.Name]); ok && v != "" && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env[f.Name], err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if *root, err = build.FindRoot(wd); err != nil {
			return err
		}
	}
	ca, err := os.ReadFile(*caBundle)
	if err != nil {
		return fmt.Errorf("CA bundle (install Debian's ca-certificates, or set -ca-bundle): %w", err)
	}
	o := build.Options{
		Root: *root, Out: *out, Version: *tag, Revision: *revision, Source: *source,
		Created: time.Unix(*created, 0).UTC(), Arch: *arch, CABundle: ca, Log: log,
	}
	if *names != "" {
		o.Names = strings.Split(*names, ",")
	}
	start := time.Now()
	res, err := build.Build(ctx, o)
	if err != nil {
		return err
	}
	for _, r := range res {
		fmt.Printf("%-14s %s:%s  %s  %s MB\n", r.Name, r.Name, r.Tag, r.Digest, strconv.FormatFloat(float64(r.Size)/1e6, 'f', 1, 64))
	}
	log.Info("done", "images", len(res), "out", *out, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func imageNames() string {
	var n []string
	for _, im := range build.Images() {
		n = append(n, im.Name)
	}
	return strings.Join(n, ", ")
}
