// Package httpapi is the control plane's REST API: the chi router, its
// middleware (request ids, logging, metrics, CORS, body limit, rate limits,
// authentication) and the handlers.
//
// Handlers return an error; writeProblem is the one place that maps an
// error to an HTTP status and an RFC 9457 problem document:
//
//	HTTP/1.1 422 Unprocessable Entity
//	Content-Type: application/problem+json
//	X-Request-Id: 4b1d…
//
//	{"type":"https://berth.dev/problems/validation","title":"Invalid input",
//	 "status":422,"detail":"1 field is invalid","request_id":"4b1d…",
//	 "errors":[{"field":"slug","reason":"must be a DNS label: …"}]}
//
// Lists are cursor-paginated: ?limit=1..200 (default 50) and ?cursor=<the
// previous page's next_cursor>, answering {"items":[…],"next_cursor":"…"|null}.
// A cursor is opaque to clients (base64url of the last row's sort key).
//
// Every tenant-scoped route loads the tenant by (tenant id, caller's
// account) before anything else; another account's tenant, and anything
// under it, is 404 exactly like a tenant that does not exist.
package httpapi
