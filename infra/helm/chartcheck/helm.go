package chartcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoHelm is returned by FindHelm when no helm binary is installed.
var ErrNoHelm = errors.New("chartcheck: helm not found (run infra/dev/helm.sh, or set BERTH_HELM)")

// Helm runs one helm binary.
type Helm struct {
	Bin string
	// Home, if set, holds helm's config, data and cache directories, so no
	// user's repositories or plugins leak into a run.
	Home string
}

// FindHelm looks for helm in BERTH_HELM, then where `go install` puts it
// (GOBIN, else GOPATH/bin, as infra/dev/helm.sh does), then on PATH.
func FindHelm(getenv func(string) string) (Helm, error) {
	var candidates []string
	if p := getenv("BERTH_HELM"); p != "" {
		candidates = append(candidates, p)
	}
	if p := getenv("GOBIN"); p != "" {
		candidates = append(candidates, filepath.Join(p, "helm"))
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) == 2 && lines[0] != "" {
			candidates = append(candidates, filepath.Join(lines[0], "helm"))
		}
		if len(lines) == 2 && lines[1] != "" {
			gopath := strings.Split(lines[1], string(os.PathListSeparator))[0]
			candidates = append(candidates, filepath.Join(gopath, "bin", "helm"))
		}
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return Helm{Bin: c}, nil
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return Helm{Bin: p}, nil
	}
	return Helm{}, ErrNoHelm
}

// Run runs helm with args; the error carries helm's stderr.
func (h Helm) Run(ctx context.Context, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.Bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.DevNull)
	if h.Home != "" {
		cmd.Env = append(cmd.Env, "HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"),
			"HELM_DATA_HOME="+filepath.Join(h.Home, "data"), "HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"))
	}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %w: %s%s", strings.Join(args, " "), err, stderr.Bytes(), stdout.Bytes())
	}
	return stdout.Bytes(), nil
}

// Version reports the helm module version built into the binary (e.g.
// v3.22.0), read by `go version -m`: helm built by go install reports only
// "v3.22" itself.
func (h Helm) Version(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "version", "-m", h.Bin).Output()
	if err != nil {
		return "", fmt.Errorf("chartcheck: go version -m %s: %w", h.Bin, err)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "mod" && f[1] == "helm.sh/helm/v3" {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("chartcheck: %s is not helm v3 built from its Go module", h.Bin)
}

// Template renders chart as release name in namespace ns with extra
// arguments (-f, --set, --api-versions) and decodes every object.
func (h Helm) Template(ctx context.Context, chart, name, ns string, args ...string) ([]Object, error) {
	out, err := h.Run(ctx, append([]string{"template", name, chart, "--namespace", ns}, args...)...)
	if err != nil {
		return nil, err
	}
	return Decode(out)
}
