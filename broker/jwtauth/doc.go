// Package jwtauth verifies the device credential tokens that clients send as
// the MQTT CONNECT password (checked by the gateway) and in an MQTT 5
// re-authentication (checked by the node): Ed25519-signed JWTs issued by the
// API, checked against the API's JWKS. It is public so both share one
// implementation.
//
// A KeySet fetches the JWKS over HTTP, keeps it in memory, refreshes it
// periodically (so removed keys stop working) and on demand when a token
// names a kid it does not know (a key rotation), at most once per
// MinRefresh so that garbage kids cannot turn into a request flood.
//
// A Verifier parses the compact JWT by hand (three base64url parts), pins
// the algorithm to EdDSA, so "none", HS256 and every other alg are refused
// before any key is touched, checks the signature, then the registered
// claims (exp exactly; nbf and iat with a small leeway for clock skew),
// the issuer, and that the MQTT user name equals sub. The token format (docs/contracts.md):
//
//	header  {"alg":"EdDSA","typ":"JWT","kid":"<kid>"}
//	claims  {"iss":"berth","sub":"crd_…","tid":"ten_…","iat":1700000000,
//	         "exp":1800000000 (optional),"jti":"…",
//	         "acl":{"pub":["filter",…],"sub":["filter",…]}}
//	token   b64url(header) "." b64url(claims) "." b64url(ed25519 signature
//	        over the first two parts as ASCII)
//
//	JWKS    {"keys":[{"kty":"OKP","crv":"Ed25519","x":"<b64url 32 bytes>",
//	         "kid":"…","alg":"EdDSA","use":"sig"}]}
package jwtauth
