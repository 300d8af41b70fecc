// Package synfilter refuses a connect flood in the kernel: an eBPF socket
// filter (BPF_PROG_TYPE_SOCKET_FILTER, attached with SO_ATTACH_BPF to the
// gateway's listening sockets) that drops a source's SYNs over a per-source
// token bucket, before the kernel makes a request socket, sends a SYN-ACK,
// or the gateway accepts anything. A dropped SYN costs the gateway a few
// hundred nanoseconds of softirq time; the client sees its connect time out
// (and, if it waits, retransmit after its RTO, about 1 s).
//
// The kernel runs a TCP listener's filter on every segment that reaches
// it (tcp_filter in tcp_v4_rcv / tcp_v6_rcv), with the skb's data at the
// TCP header; the program reads the IP header with
// bpf_skb_load_bytes_relative(BPF_HDR_START_NET). Accepted sockets inherit
// the filter; the gateway detaches it from each one it admits (Detach), so
// relayed traffic never runs it.
//
// The program:
//
//	not IPv4/IPv6 TCP, or not a bare SYN (SYN without ACK, RST, FIN)  → pass
//	key   = source: IPv4 as ::ffff:a.b.c.d, IPv6 its /64 (as the
//	        gateway's pending-connection cap counts sources)
//	now   = bpf_ktime_get_ns()
//	tat   = buckets[key] (0 when absent)           theoretical arrival time
//	next  = max(tat, now) + interval               interval = 1e9/rate ns
//	next - now > burst × interval                  → dropped[0]++, drop (return 0)
//	buckets[key] = next                            → pass (return 0xffffffff)
//
// The bucket is GCRA, a token bucket of rate and burst kept as one u64
// per source. Updates are not atomic across CPUs: two SYNs of one source
// on two CPUs at once may both pass, so the bucket admits at most a few
// more than its burst; the gateway's userspace limiters stay behind it.
// Hold (the gateway's cool-down of a source whose CONNECTs keep failing)
// writes a source's bucket from userspace: tat = now + d + burst ×
// interval drops its every SYN for d, then passes one an interval.
// A socket filter's return value is the number of bytes kept: a pass
// must return at least the segment's length (tcp_filter trims to
// max(TCP header, return value)), hence 0xffffffff, never 1.
//
// Maps (never change their layout without changing the program):
//
//	buckets  LRU hash  key [16]byte source   value u64 tat, ns (CLOCK_MONOTONIC)
//	dropped  per-CPU array[1]                value u64 SYNs dropped
//
// Loading the program needs CAP_BPF or root wherever unprivileged BPF is
// off (kernel.unprivileged_bpf_disabled, the default of most
// distributions); New fails without it and the caller goes on with its
// userspace limiters.
package synfilter
