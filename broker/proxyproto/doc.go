// Package proxyproto encodes, decodes, signs and verifies the PROXY protocol
// version 2 header that a Berth gateway writes in front of every client
// connection it forwards to a broker node.
//
// The gateway builds a header with a Signer; the node reads it with
// ReadHeader (which reads exactly the header and not one byte more, under a
// deadline and a size bound) and checks it with a Verifier before it reads
// any MQTT byte. Plain Header/Parse are the protocol layer; Signer/Verifier
// add the Berth TLVs, the HMAC and the replay defence (docs/contracts.md).
//
// # Wire format
//
// Every number is big-endian. The layout and the constants are fixed by the
// PROXY protocol specification (haproxy.org, proxy-protocol.txt, section
// 2.2) and the Berth contract, and never change.
//
//	offset  size  field
//	     0    12  signature  0D 0A 0D 0A 00 0D 0A 51 55 49 54 0A  ("\r\n\r\n\0\r\nQUIT\n")
//	    12     1  version (high nibble, always 0x2) | command (low nibble:
//	              0x0 LOCAL, 0x1 PROXY)
//	    13     1  address family (high nibble: 0x0 UNSPEC, 0x1 INET,
//	              0x2 INET6) | transport (low nibble: 0x0 UNSPEC, 0x1 STREAM)
//	    14     2  length of everything after these 16 bytes
//	    16     -  addresses:
//	              INET  (12): src addr 4, dst addr 4, src port 2, dst port 2
//	              INET6 (36): src addr 16, dst addr 16, src port 2, dst port 2
//	              UNSPEC (0)
//	     -     -  TLVs, to the end: type 1, length 2, value (length bytes)
//
// Berth TLVs (application range 0xE0-0xEF):
//
//	type  value
//	0xE0  tenant id (UTF-8)
//	0xE1  credential id (UTF-8)
//	0xE2  ACL: the JSON of the token's "acl" claim
//	0xE3  token expiry, Unix seconds, 8 bytes (0 = none)
//	0xE4  issued-at of this header, Unix nanoseconds, 8 bytes
//	0xE5  nonce, 16 random bytes
//	0xEF  HMAC-SHA256 (32 bytes) over the whole header, signature included,
//	      with this TLV's value zeroed; keyed by the shared secret; always
//	      the last TLV
//
// A signed header with an IPv4 client therefore looks like:
//
//	0D0A0D0A000D0A515549540A  signature
//	21                        v2, PROXY
//	11                        INET, STREAM
//	LLLL                      length
//	C0A80001 0A000002 D431 1D8B   192.168.0.1:54321 -> 10.0.0.2:7563
//	E0 000E "ten_..."         tenant id
//	E1 000E "crd_..."         credential id
//	E2 nnnn {"pub":[..],...}  ACL
//	E3 0008 0000000067...     token expiry
//	E4 0008 1875...           issued at
//	E5 0010 <16 bytes>        nonce
//	EF 0020 <32 bytes>        HMAC-SHA256
//
// # Replay defence
//
// A Verifier refuses a header issued more than Window (30 s) before now or
// more than MaxSkew after it, and remembers every accepted nonce until its
// window has passed. The nonce cache is bounded: when it is full of nonces
// still inside their window, new headers are refused (fail closed) rather
// than forgetting a nonce that could then be replayed. Only headers with a
// valid HMAC reach the cache, so only a holder of the secret can fill it.
//
// # Rotation
//
// A Verifier may hold a previous secret beside the current one
// (VerifierOptions.Previous) and accepts headers signed with either, so the
// shared secret rotates without refusing a connection (docs/operations.md).
package proxyproto
