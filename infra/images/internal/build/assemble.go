package build

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"berth.dev/images/internal/layer"
)

// Label keys (OCI image spec annotations, used as config labels).
const (
	LabelVersion     = "org.opencontainers.image.version"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelSource      = "org.opencontainers.image.source"
	LabelCreated     = "org.opencontainers.image.created"
	LabelTitle       = "org.opencontainers.image.title"
	LabelDescription = "org.opencontainers.image.description"
	// RefName annotates an OCI layout's index.json entry with its tag.
	RefName = "org.opencontainers.image.ref.name"
)

// Assemble writes one OCI layout per image under o.Out from the binaries
// in binDir (as Compile left them), replacing what was there.
func Assemble(o Options, imgs []Image, binDir string) ([]Result, error) {
	ents, err := layer.Base(o.CABundle)
	if err != nil {
		return nil, err
	}
	base, err := layer.New(ents, o.Created)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	var res []Result
	for _, im := range imgs {
		bin, err := os.ReadFile(filepath.Join(binDir, im.Binary()))
		if err != nil {
			return nil, fmt.Errorf("build: %s: %w", im.Name, err)
		}
		img, err := Compose(o, im, base, bin)
		if err != nil {
			return nil, fmt.Errorf("build: %s: %w", im.Name, err)
		}
		r, err := writeLayout(o, im, img)
		if err != nil {
			return nil, fmt.Errorf("build: %s: %w", im.Name, err)
		}
		o.logger().Info("image", "name", r.Name, "tag", r.Tag, "digest", r.Digest.String(), "bytes", r.Size, "layout", r.Layout)
		res = append(res, r)
	}
	return res, nil
}

// Compose returns im's image: base, then a layer with the binary at
// im.Entrypoint(); run as layer.UID:layer.GID in its home, labelled with
// o's version, revision, source and created time.
func Compose(o Options, im Image, base v1.Layer, bin []byte) (v1.Image, error) {
	binLayer, err := layer.New([]layer.Entry{layer.File(im.Entrypoint(), 0o755, 0, 0, bin)}, o.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created.UTC()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "berth images: base (passwd, group, nsswitch.conf, CA certificates)"}},
		mutate.Addendum{Layer: binLayer, History: v1.History{Created: created, CreatedBy: "berth images: go build -trimpath " + im.Package}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.Arch, created
	cf.Config = v1.Config{
		Entrypoint: []string{im.Entrypoint()},
		User:       strconv.Itoa(layer.UID) + ":" + strconv.Itoa(layer.GID),
		WorkingDir: layer.Home,
		Env:        []string{"PATH=" + BinDir, "HOME=" + layer.Home},
		Labels: map[string]string{
			LabelTitle:       im.Name,
			LabelDescription: im.Description,
			LabelVersion:     o.Version,
			LabelRevision:    o.Revision,
			LabelSource:      o.Source,
			LabelCreated:     created.Format(time.RFC3339),
		},
	}
	if len(im.Ports) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range im.Ports {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	return mutate.ConfigFile(img, cf)
}

// writeLayout replaces o.Out/<name> with an OCI layout holding img,
// tagged o.Version.
func writeLayout(o Options, im Image, img v1.Image) (Result, error) {
	dir := filepath.Join(o.Out, im.Name)
	if err := os.RemoveAll(dir); err != nil {
		return Result{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return Result{}, err
	}
	if err := p.AppendImage(img,
		layout.WithAnnotations(map[string]string{RefName: o.Version}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: o.Arch}),
	); err != nil {
		return Result{}, err
	}
	r := Result{Name: im.Name, Tag: o.Version, Layout: dir}
	if r.Digest, err = img.Digest(); err != nil {
		return Result{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return Result{}, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return Result{}, err
	}
	r.Size = int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		r.Size += l.Size
	}
	return r, nil
}

func (o Options) logger() *slog.Logger {
	if o.Log != nil {
		return o.Log
	}
	return slog.New(slog.DiscardHandler)
}
