// Package msgtrace samples and exports the spans of the message path: what
// happens on a node to a PUBLISH, from the read to its delivery to each
// subscriber.
//
// A shard decides per message, on the connection's reader, whether the
// message is traced (Sampler.Sample): always when the device's W3C
// traceparent user property says sampled, else with the tenant's
// trace_sample_rate; either way at most Sampler's cap per second (a token
// bucket, so a device cannot flood the span store: its "sampled" flag asks,
// the cap decides). An unsampled message
// costs a random draw and, for an MQTT 5 PUBLISH with user properties, a
// scan of their keys: nothing is allocated. A sampled message gets a
// trace id (the device's, or a fresh one) and a root span id at once, so
// that every span of its tree can be exported on its own, when it ends:
//
//	mqtt.publish  (root; child of the device's span when it sent a traceparent)
//	├── acl        the publish ACL check
//	├── quota      the tenant's quotas (rates, size, monthly, retained)
//	├── wal.append the message log append (QoS 1/2 with a message log)
//	├── wal.fsync  the group commit the PUBACK/PUBREC waits for (-fsync always)
//	├── route      topic match and hand-off to the sessions (matched_subscribers)
//	└── deliver    one per live subscriber copy: until written to its socket
//	               (QoS 0), until its PUBACK (QoS 1) or PUBCOMP (QoS 2), with an
//	               event "written" when the socket took it
//
// The shard hands ended spans (Span, plain values) to a Sink without
// blocking. Exporter is the node's Sink: a bounded queue (drops counted)
// and one goroutine that turns them into OpenTelemetry spans with the ids
// chosen at sampling (IDGenerator), through a berth.dev/broker/tracing
// provider: Postgres (table spans) and OTLP when configured.
//
// Attributes: tenant_id, client_id (the publisher), topic, qos,
// payload_size on every span; matched_subscribers on route; subscriber and
// acked on deliver. Never addresses.
package msgtrace
