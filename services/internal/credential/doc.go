// Package credential signs device credential tokens and publishes the keys
// that verify them.
//
// A token is a compact JWS (RFC 7515) with EdDSA over Ed25519 (RFC 8037):
//
//	base64url(header) "." base64url(claims) "." base64url(signature)
//
//	header: {"alg":"EdDSA","typ":"JWT","kid":"<kid>"}
//	claims: {"iss":"berth","sub":"crd_…","tid":"ten_…","iat":1700000000,
//	         "exp":1700003600 (only when the credential expires),
//	         "jti":"<random>","acl":{"pub":["…"],"sub":["…"]}}
//
// The JWKS (RFC 7517, OKP keys per RFC 8037) lists every key a live token
// may carry:
//
//	{"keys":[{"kty":"OKP","crv":"Ed25519","x":"<b64url public key>",
//	          "kid":"<kid>","alg":"EdDSA","use":"sig"}]}
//
// Keys live in Postgres (signing_keys). The private seed is sealed with
// AES-256-GCM under a key-encryption key when one is configured:
//
//	private_key = nonce (12 bytes) || ciphertext+tag (32+16 bytes), AAD = kid
//
// Rotation makes a new key the signer and retires the old one, which stays
// in the JWKS while any unrevoked, unexpired credential whose newest token
// it signed exists. POST .../credentials/{cid}/token signs a fresh token
// for an existing credential (same sub, tid, acl; new iat, jti, exp) with
// the active key and records that key as the credential's kid.
package credential
