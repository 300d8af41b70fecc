// Package e2e holds Berth's end-to-end tests: real api, broker node and
// gateway processes built from this checkout, real Postgres and Redis, and
// real MQTT clients (paho 3.1.1 and 5.0, mosquitto_pub/mosquitto_sub).
//
// The attack suite (attack_*_test.go, go test -run TestAttack) attacks a
// running stack as another account or tenant would: every tenant-scoped
// operation of the served OpenAPI document with another account's key and
// session, MQTT across tenants and beyond a credential's ACL, and a free
// tenant trying to exhaust a node while a neighbour's latency is measured
// (the NOISY-NEIGHBOUR line of its log).
//
// The fault suite (fault_*_test.go, go test -run TestFault) drives QoS 1
// load through the gateway with a persistent subscriber, injects one fault
// per test (node SIGKILL loop, gateway SIGKILL, Postgres restart on a
// private server, Redis SIGKILL on a private server, a subscriber that
// never reads) and logs a FAULT line: acked, lost (must be 0),
// duplicates, recovery time. BERTH_FAULT_CYCLES sets the node-crash
// loop's length (`make fault`).
package e2e
