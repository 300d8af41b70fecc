package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// dist is Vite's build output. "all:" keeps the committed dist/.gitkeep in
// the pattern, so the package compiles before anything was built; files
// whose names start with "." are never served.
//
//go:embed all:dist
var dist embed.FS

// Response headers.
const (
	// CSP allows only the app's own scripts, styles and fonts: the build
	// emits no inline script or style. connect-src admits the REST API and
	// the MQTT-over-WebSocket live views.
	CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; " +
		"connect-src 'self' ws: wss:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

	cacheImmutable  = "public, max-age=31536000, immutable"
	cacheRevalidate = "no-cache"

	// NotBuilt is the whole body of the 503 a dashboard without a build answers.
	NotBuilt = `The dashboard is not built: run "make web" (npm ci && npm run build in web/), then rebuild the API.`
)

// assetsDir holds Vite's content-hashed output.
const assetsDir = "assets/"

// gzipMin is the smallest file worth compressing.
const gzipMin = 1024

// Dashboard is an http.Handler serving the built dashboard from memory.
type Dashboard struct {
	files map[string]*file // by slash path relative to dist, no leading slash
	index *file            // index.html; nil when the dashboard is not built
}

// file is one served file, read, hashed and compressed once.
type file struct {
	name   string
	data   []byte
	etag   string
	ctype  string
	gz     []byte // gzip of data; nil when not worth it
	gzEtag string
}

// Handler returns the dashboard built into this binary. It logs once when
// there is no build. It panics only when the embedded files cannot be
// read, which is a defect of the binary, not of its environment.
func Handler(log *slog.Logger) *Dashboard {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(fmt.Errorf("web: embedded dist: %w", err))
	}
	d, err := newDashboard(sub, log)
	if err != nil {
		panic(err)
	}
	return d
}

// newDashboard serves the files of fsys (the contents of dist).
func newDashboard(fsys fs.FS, log *slog.Logger) (*Dashboard, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dashboard{files: make(map[string]*file)}
	err := fs.WalkDir(fsys, ".", func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if name != "." && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() {
			return nil
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		d.files[name] = newFile(name, data)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: load dashboard: %w", err)
	}
	d.index = d.files["index.html"]
	if d.index == nil {
		log.Info("dashboard is not built; non-API paths answer 503 until it is", slog.String("build", "make web"))
	}
	return d, nil
}

func newFile(name string, data []byte) *file {
	f := &file{name: name, data: data, etag: etag(data)}
	f.ctype = mime.TypeByExtension(path.Ext(name))
	if f.ctype == "" {
		f.ctype = http.DetectContentType(data)
	}
	if len(data) >= gzipMin && compressible(f.ctype) {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression) // a valid level cannot fail
		_, _ = zw.Write(data)                                  // writes to a bytes.Buffer cannot fail
		_ = zw.Close()
		if b.Len() < len(data)*9/10 {
			f.gz = b.Bytes()
			f.gzEtag = etag(f.gz)
		}
	}
	return f
}

// etag is a strong validator: a hash of the bytes sent.
func etag(data []byte) string {
	sum := sha256.Sum256(data)
	return `"` + base64.RawURLEncoding.EncodeToString(sum[:18]) + `"`
}

func compressible(ctype string) bool {
	mt, _, _ := strings.Cut(ctype, ";")
	switch mt = strings.TrimSpace(mt); {
	case strings.HasPrefix(mt, "text/"):
		return true
	case mt == "application/javascript", mt == "application/json", mt == "application/manifest+json",
		mt == "image/svg+xml", mt == "application/wasm", mt == "application/xml":
		return true
	}
	return false
}

// ServeHTTP answers GET and HEAD; see the package comment for what each
// path answers.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if strings.HasPrefix(name+"/", assetsDir) {
		f := d.files[name]
		if f == nil {
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		h.Set("Cache-Control", cacheImmutable)
		serve(w, r, f)
		return
	}
	if d.index == nil {
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(NotBuilt + "\n"))
		return
	}
	f := d.files[name]
	if f == nil {
		f = d.index // the app routes this path in the browser
	}
	h.Set("Cache-Control", cacheRevalidate)
	serve(w, r, f)
}

// serve sends f, gzipped when it has a compressed form and the client
// takes gzip; ranges and conditional requests are ServeContent's.
func serve(w http.ResponseWriter, r *http.Request, f *file) {
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	data, tag := f.data, f.etag
	if f.gz != nil {
		h.Add("Vary", "Accept-Encoding")
		// A range of the compressed form would confuse more clients than
		// it helps: ranges get the identity encoding.
		if r.Header.Get("Range") == "" && acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.Set("Content-Encoding", "gzip")
			data, tag = f.gz, f.gzEtag
		}
	}
	h.Set("ETag", tag)
	http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(data))
}

// acceptsGzip reports whether an Accept-Encoding value lists gzip with a
// non-zero quality (RFC 9110, section 12.5.3).
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		for p := range strings.SplitSeq(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(k, "q") {
				q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return err == nil && q > 0
			}
		}
		return true
	}
	return false
}
