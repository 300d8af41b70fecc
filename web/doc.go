// Package web serves Berth's dashboard: the single-page app that Vite
// builds into web/dist (`make web`, i.e. npm ci && npm run build in web/),
// embedded into the API binary with //go:embed and served by
// services/cmd/api for every GET or HEAD outside /v1.
//
// What each path answers:
//
//	/assets/<file>   the file, Cache-Control: public, max-age=31536000, immutable
//	                 (Vite puts a content hash in these names); missing: 404
//	/<file in dist>  the file (favicon.svg, robots.txt…), Cache-Control: no-cache
//	anything else    index.html (the app routes in the browser), no-cache
//
// Every answer carries a strict Content-Security-Policy (no inline script
// or style), nosniff, no-referrer and DENY framing. ETags are content
// hashes taken once at startup, so revalidation answers 304; text files
// are gzipped once at startup and sent compressed to clients that accept
// gzip. Without a build (dist holds only .gitkeep, e.g. a `go build` on a
// machine without Node) non-asset paths answer 503 with a one-line hint.
package web
