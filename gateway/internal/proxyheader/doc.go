// Package proxyheader reads the PROXY protocol header (haproxy.org,
// proxy-protocol.txt) that a load balancer writes in front of each
// connection it forwards, so that the gateway knows the device's address
// although the TCP connection comes from the balancer.
//
// Read takes version 1 (text) and version 2 (binary) alike and reads
// exactly the header, never a byte of the MQTT (or TLS) stream after it,
// without buffering: the caller keeps the bare connection, which the
// gateway's relay splices. The caller bounds the read with a deadline.
//
// # Version 1
//
// One line of US-ASCII, at most 107 bytes with its CRLF:
//
//	"PROXY TCP4 203.0.113.7 10.0.0.5 51234 1883\r\n"
//	"PROXY TCP6 2001:db8::7 2001:db8::5 51234 1883\r\n"
//	"PROXY UNKNOWN\r\n"  (or "PROXY UNKNOWN <anything>\r\n")
//
// Fields are separated by exactly one space; the addresses must be of the
// family named, the ports decimal 0-65535. UNKNOWN names no device: the
// balancer's own connection (a health check).
//
// # Version 2
//
// The layout of package berth.dev/broker/proxyproto (which parses it):
//
//	0D0A0D0A000D0A515549540A  signature (12 bytes)
//	2C                        version 2 (high nibble), command (low
//	                          nibble: 0 LOCAL, 1 PROXY)
//	FT                        family (0 UNSPEC, 1 INET, 2 INET6) and
//	                          transport (1 STREAM)
//	LLLL                      length of the rest, big-endian
//	addresses, then TLVs      (TLVs, such as AWS's VPC endpoint id,
//	                          are read and ignored)
//
// LOCAL, or PROXY with family UNSPEC, names no device.
//
// # Reading without reading ahead
//
// Every header is at least 15 bytes long ("PROXY UNKNOWN\r\n"; a version 2
// header is at least 16), so Read first reads 15 bytes and tells the
// versions apart by them. A version 2 header announces its length. A
// version 1 line does not, so Read asks for no more bytes than the shortest
// well-formed rest of the line could be: the fields still missing, one
// space and one character each, and the CRLF. A well-formed header is
// therefore never over-read; a malformed one is an error and its
// connection is closed anyway.
package proxyheader
