package build

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Ldflags are the linker flags of every binary: no symbol table or DWARF,
// no build id, and the version and revision in package main's version
// and revision variables (each cmd's -version prints them).
func Ldflags(version, revision string) string {
	return fmt.Sprintf("-s -w -buildid= -X main.version=%s -X main.revision=%s", version, revision)
}

// Compile builds the images' binaries into dir, static (CGO_ENABLED=0)
// for linux/o.Arch, with -trimpath and without VCS stamping (the
// revision is linked in explicitly), in one go build run from o.Root.
func Compile(ctx context.Context, o Options, imgs []Image, dir string) error {
	goCmd := o.Go
	if goCmd == "" {
		goCmd = "go"
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", Ldflags(o.Version, o.Revision), "-o", dir + string(filepath.Separator)}
	for _, im := range imgs {
		args = append(args, im.Package)
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build: go %s: %w\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	o.logger().Info("compiled", "binaries", len(imgs), "arch", o.Arch, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
