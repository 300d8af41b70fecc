// Package account holds what proves who a caller is: password hashing
// (argon2id), dashboard sessions (a short-lived token plus a refresh token)
// and API keys. Secrets are random, shown once, and stored only as SHA-256
// hashes; passwords only as argon2id hashes.
//
// Secret formats (the prefix tells a bearer token's kind at a glance and
// lets secret scanners find leaked ones):
//
//	berth_key_<52 base32 chars>   API key (32 random bytes)
//	berth_ses_<52 base32 chars>   session token
//	berth_ref_<52 base32 chars>   refresh token
//
// Password hashes are PHC strings:
//
//	$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt b64>$<hash b64>
package account
