// Package nodeclient calls a broker node's internal admin HTTP API
// (docs/contracts.md, "Node admin HTTP"): sessions, topics, retained
// messages and publish, for one tenant at a time.
//
//	GET    /admin/tenants/{tid}/sessions               → {"sessions":[…]}
//	DELETE /admin/tenants/{tid}/sessions/{client_id}   → 204 | 404
//	GET    /admin/tenants/{tid}/topics                 → {"topics":[…]}
//	GET    /admin/tenants/{tid}/retained?filter=F      → {"retained":[…]}
//	DELETE /admin/tenants/{tid}/retained?filter=F      → {"deleted":N}
//	POST   /admin/tenants/{tid}/publish                → 202 {"accepted":true} | 400 | 413
//
// Every request carries "Authorization: Bearer <node token>". Errors come
// back as {"error":"…"}; a node that cannot be reached (or answers 5xx) is
// ErrUnavailable, any other refusal a *StatusError.
package nodeclient
