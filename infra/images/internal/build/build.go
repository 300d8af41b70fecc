// Package build builds Berth's container images without a Docker daemon:
// it compiles each process's static binary (CGO off, -trimpath, version
// and revision linked in) and writes it, on a base layer of its own
// (package layer), as an OCI image layout per image. Every input is
// explicit (no clock, no host paths, sorted files), so the same sources,
// options and toolchain give the same digests.
package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Options configure a build.
type Options struct {
	Root     string    // repository root, holding go.work
	Out      string    // output directory: one OCI layout per image, Out/<name>
	Version  string    // the images' tag and version label, and what each binary's -version prints
	Revision string    // the source revision (a commit id)
	Source   string    // the source repository's URL (org.opencontainers.image.source)
	Created  time.Time // the one time stamped everywhere (files, history, config)
	Arch     string    // GOARCH of the binaries and the image platform (linux only)
	CABundle []byte    // PEM CA certificates for /etc/ssl/certs/ca-certificates.crt
	Names    []string  // images to build; empty: all
	Go       string    // the go command; empty: "go"
	Log      *slog.Logger
}

// Result is one built image.
type Result struct {
	Name   string
	Tag    string
	Digest v1.Hash // the image manifest's digest
	Size   int64   // manifest, config and compressed layers, in bytes
	Layout string  // the OCI layout directory
}

// ErrOptions reports invalid options.
var ErrOptions = errors.New("build: invalid options")

// tagRE is an OCI distribution tag.
var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// validate checks o and returns the images it selects.
func (o Options) validate() ([]Image, error) {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrOptions}, a...)...))
	}
	if o.Root == "" || o.Out == "" {
		bad("Root and Out are required")
	}
	if !tagRE.MatchString(o.Version) {
		bad("version %q is not an image tag ([A-Za-z0-9_][A-Za-z0-9._-]*, at most 128)", o.Version)
	}
	if o.Revision == "" || strings.ContainsAny(o.Revision, " \t\n'\"") {
		bad("revision %q: empty or holds spaces or quotes", o.Revision)
	}
	if o.Source == "" {
		bad("source is required")
	}
	if o.Arch == "" {
		bad("arch is required")
	}
	var imgs []Image
	for _, im := range Images() {
		if len(o.Names) == 0 || slices.Contains(o.Names, im.Name) {
			imgs = append(imgs, im)
		}
	}
	for _, n := range o.Names {
		if !slices.ContainsFunc(imgs, func(im Image) bool { return im.Name == n }) {
			bad("no image %q", n)
		}
	}
	return imgs, errors.Join(errs...)
}

// Build compiles the selected binaries into a temporary directory and
// writes their images under o.Out.
func Build(ctx context.Context, o Options) ([]Result, error) {
	imgs, err := o.validate()
	if err != nil {
		return nil, err
	}
	bin, err := os.MkdirTemp("", "berth-images-bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(bin)
	if err := Compile(ctx, o, imgs, bin); err != nil {
		return nil, err
	}
	return Assemble(o, imgs, bin)
}

// FindRoot returns the nearest directory at or above dir holding go.work.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("build: no go.work at or above the working directory")
		}
		dir = parent
	}
}
