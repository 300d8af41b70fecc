package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

const indexHTML = `<!doctype html><html><head><script type="module" src="/assets/index-4f2a.js"></script></head><body></body></html>`

// appJS is large and repetitive enough to be served gzipped.
var appJS = strings.Repeat("export const answer = 42;\n", 200)

// built is a dist as `vite build` leaves it.
func built() fstest.MapFS {
	return fstest.MapFS{
		"index.html":            {Data: []byte(indexHTML)},
		"favicon.svg":           {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
		"assets/index-4f2a.js":  {Data: []byte(appJS)},
		"assets/index-9c1e.css": {Data: []byte("body{margin:0}")},
		".gitkeep":              {Data: nil},
	}
}

func newTest(t *testing.T, fsys fstest.MapFS) (*Dashboard, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	d, err := newDashboard(fsys, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return d, &logs
}

func do(h http.Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestDashboard(t *testing.T) {
	d, _ := newTest(t, built())
	for _, tc := range []struct {
		name, method, path string
		status             int
		body               string // "" = not checked
		ctype, cache       string
	}{
		{"root is the app", "GET", "/", 200, indexHTML, "text/html; charset=utf-8", "no-cache"},
		{"app route falls back", "GET", "/tenants/t_1/usage", 200, indexHTML, "text/html; charset=utf-8", "no-cache"},
		{"trailing slash falls back", "GET", "/credentials/", 200, indexHTML, "text/html; charset=utf-8", "no-cache"},
		{"index by name", "GET", "/index.html", 200, indexHTML, "text/html; charset=utf-8", "no-cache"},
		{"dot-files are not served", "GET", "/.gitkeep", 200, indexHTML, "text/html; charset=utf-8", "no-cache"},
		{"traversal stays inside", "GET", "/../../etc/passwd", 200, indexHTML, "text/html; charset=utf-8", "no-cache"},
		{"top-level file", "GET", "/favicon.svg", 200, `<svg xmlns="http://www.w3.org/2000/svg"/>`, "image/svg+xml", "no-cache"},
		{"hashed asset", "GET", "/assets/index-4f2a.js", 200, appJS, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"},
		{"hashed css", "GET", "/assets/index-9c1e.css", 200, "body{margin:0}", "text/css; charset=utf-8", "public, max-age=31536000, immutable"},
		{"missing asset is 404", "GET", "/assets/index-0000.js", 404, "", "text/plain; charset=utf-8", ""},
		{"assets folder is 404", "GET", "/assets/", 404, "", "text/plain; charset=utf-8", ""},
		{"HEAD", "HEAD", "/tenants", 200, "", "text/html; charset=utf-8", "no-cache"},
		{"POST is refused", "POST", "/tenants", 405, "", "text/plain; charset=utf-8", ""},
		{"DELETE is refused", "DELETE", "/assets/index-4f2a.js", 405, "", "text/plain; charset=utf-8", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := do(d, tc.method, tc.path)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d; body %q", w.Code, tc.status, w.Body)
			}
			if tc.body != "" && w.Body.String() != tc.body {
				t.Fatalf("body %q, want %q", w.Body, tc.body)
			}
			if got := w.Header().Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type %q, want %q", got, tc.ctype)
			}
			if got := w.Header().Get("Cache-Control"); got != tc.cache {
				t.Errorf("Cache-Control %q, want %q", got, tc.cache)
			}
			for k, v := range map[string]string{
				"Content-Security-Policy": CSP,
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"X-Frame-Options":         "DENY",
			} {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s %q, want %q", k, got, v)
				}
			}
			if tc.status == 405 && w.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q", w.Header().Get("Allow"))
			}
			if tc.status == 404 && strings.Contains(w.Body.String(), "<html") {
				t.Errorf("404 answered with HTML: %q", w.Body)
			}
		})
	}
}

func TestCSPHasNoInlineScript(t *testing.T) {
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*"} {
		if strings.Contains(CSP, bad) {
			t.Errorf("CSP allows %q: %s", bad, CSP)
		}
	}
}

func TestConditional(t *testing.T) {
	d, _ := newTest(t, built())
	for _, path := range []string{"/", "/tenants/t_1", "/favicon.svg", "/assets/index-9c1e.css"} {
		t.Run(path, func(t *testing.T) {
			first := do(d, "GET", path)
			tag := first.Header().Get("ETag")
			if !strings.HasPrefix(tag, `"`) || len(tag) < 10 {
				t.Fatalf("ETag %q", tag)
			}
			again := do(d, "GET", path, "If-None-Match", tag)
			if again.Code != http.StatusNotModified || again.Body.Len() != 0 {
				t.Fatalf("If-None-Match: status %d, body %q", again.Code, again.Body)
			}
			if again.Header().Get("ETag") != tag || again.Header().Get("Cache-Control") == "" {
				t.Fatalf("304 headers %v", again.Header())
			}
			if stale := do(d, "GET", path, "If-None-Match", `"other"`); stale.Code != http.StatusOK {
				t.Fatalf("stale ETag: status %d", stale.Code)
			}
		})
	}
	// The fallback and index.html are one resource, so one validator.
	if a, b := do(d, "GET", "/a").Header().Get("ETag"), do(d, "GET", "/index.html").Header().Get("ETag"); a != b {
		t.Fatalf("fallback ETag %s, index ETag %s", a, b)
	}
}

func TestRange(t *testing.T) {
	d, _ := newTest(t, built())
	w := do(d, "GET", "/assets/index-4f2a.js", "Range", "bytes=0-5", "Accept-Encoding", "gzip")
	if w.Code != http.StatusPartialContent || w.Body.String() != appJS[:6] {
		t.Fatalf("status %d, body %q", w.Code, w.Body)
	}
	if w.Header().Get("Content-Encoding") != "" {
		t.Fatal("a range of the gzipped form")
	}
}

func TestGzip(t *testing.T) {
	d, _ := newTest(t, built())
	plain := do(d, "GET", "/assets/index-4f2a.js")
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{
		{"", false},
		{"gzip", true},
		{"br, gzip;q=0.8, deflate", true},
		{"GZIP", true},
		{"gzip;q=0", false},
		{"gzip; q=0.000", false},
		{"br", false},
		{"x-gzip", false},
	} {
		t.Run(tc.accept, func(t *testing.T) {
			w := do(d, "GET", "/assets/index-4f2a.js", "Accept-Encoding", tc.accept)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d", w.Code)
			}
			if w.Header().Get("Vary") != "Accept-Encoding" {
				t.Errorf("Vary %q", w.Header().Get("Vary"))
			}
			body := w.Body.Bytes()
			if got := w.Header().Get("Content-Encoding") == "gzip"; got != tc.gzip {
				t.Fatalf("gzip %v, want %v", got, tc.gzip)
			}
			if !tc.gzip {
				if string(body) != appJS {
					t.Fatal("identity body differs")
				}
				return
			}
			if w.Header().Get("ETag") == plain.Header().Get("ETag") {
				t.Error("gzip and identity share an ETag")
			}
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != appJS || len(body) >= len(appJS) {
				t.Fatalf("gzip body: %d bytes, inflates to %d", len(body), len(got))
			}
		})
	}
	// Small files are not worth it.
	if w := do(d, "GET", "/favicon.svg", "Accept-Encoding", "gzip"); w.Header().Get("Content-Encoding") != "" || w.Header().Get("Vary") != "" {
		t.Fatalf("small file headers %v", w.Header())
	}
}

func TestNotBuilt(t *testing.T) {
	d, logs := newTest(t, fstest.MapFS{".gitkeep": {Data: nil}})
	for _, path := range []string{"/", "/tenants/t_1", "/index.html"} {
		w := do(d, "GET", path)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: status %d", path, w.Code)
		}
		if ct := w.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Fatalf("%s: Content-Type %q", path, ct)
		}
		if got := w.Body.String(); got != NotBuilt+"\n" || strings.Count(got, "\n") != 1 {
			t.Fatalf("%s: body %q", path, got)
		}
		if w.Header().Get("Content-Security-Policy") != CSP {
			t.Fatalf("%s: no CSP", path)
		}
	}
	if w := do(d, "GET", "/assets/index-4f2a.js"); w.Code != http.StatusNotFound {
		t.Fatalf("missing asset: status %d", w.Code)
	}
	if n := strings.Count(logs.String(), "dashboard is not built"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, logs)
	}
	if _, logs := newTest(t, built()); logs.Len() != 0 {
		t.Fatalf("a built dashboard logged:\n%s", logs)
	}
}

// TestEmbedded checks the dist this binary was built with, whichever it
// is: a real build, or only .gitkeep on a machine without Node.
func TestEmbedded(t *testing.T) {
	d := Handler(slog.New(slog.DiscardHandler))
	w := do(d, "GET", "/")
	switch {
	case d.index != nil && w.Code == http.StatusOK && strings.Contains(w.Body.String(), "<"):
	case d.index == nil && w.Code == http.StatusServiceUnavailable:
	default:
		t.Fatalf("built %v: status %d, body %.200q", d.index != nil, w.Code, w.Body)
	}
	if w := do(d, "GET", "/assets/no-such-file.js"); w.Code != http.StatusNotFound {
		t.Fatalf("missing asset: status %d", w.Code)
	}
	if d.index != nil && strings.Contains(string(d.index.data), "<script>") {
		t.Fatal("index.html has an inline script the CSP refuses")
	}
}
