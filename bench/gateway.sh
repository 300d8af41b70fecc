#!/usr/bin/env bash
# bench/gateway.sh: what the hosted path costs. Starts the whole stack as
# `make run` does (Postgres, Redis, API, one node, one gateway), moves the
# demo tenant to the business plan so that its quotas do not throttle the
# load, makes a credential for the load tool's topics, and runs
# bench/run.sh with the standalone broker beside the `gateway` column
# (client -> gateway -> node, with JWT, ACL, quotas and the message log).
# Stops the stack afterwards, Postgres and Redis included.
#
#   bench/gateway.sh                          # QoS 0/1 ingest and latency
#   bench/gateway.sh -only '^latency-1k$'     # other scenario ids
# Other flags go to bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. infra/dev/lib.sh

MQTT_ADDR=${BERTH_MQTT_LISTEN:-127.0.0.1:1883}
port_busy "${MQTT_ADDR##*:}" && die "something already listens on $MQTT_ADDR: stop it (make run?) first"

stack_log=$(mktemp -t berth-gateway-bench.XXXXXX)
# A session of its own, so that the whole stack can be stopped as a group.
setsid infra/dev/run.sh >"$stack_log" 2>&1 &
stack=$!
stop_stack() {
	kill -INT -- "-$stack" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$stack" 2>/dev/null || break; sleep 0.1; done
	rm -f "$stack_log"
}
trap stop_stack EXIT

for _ in $(seq 900); do
	grep -q 'Ctrl-C stops everything' "$stack_log" && break
	kill -0 "$stack" 2>/dev/null || { cat "$stack_log" >&2; die "the stack did not start"; }
	sleep 0.1
done
grep -q 'Ctrl-C stops everything' "$stack_log" || { cat "$stack_log" >&2; die "the stack did not start in 90 s"; }
. "$BERTH_RUN_DIR/demo.env"
[ -n "${BERTH_API_KEY:-}" ] || die "no demo credential in $BERTH_RUN_DIR/demo.env"

api() { # api METHOD PATH BODY
	curl -fsS -X "$1" -H "Authorization: Bearer $BERTH_API_KEY" -H 'Content-Type: application/json' \
		-d "$3" "$BERTH_API_URL/v1/tenants/$BERTH_TENANT_ID$2"
}
api PATCH "" '{"plan":"business"}' >/dev/null
cred=$(api POST /credentials '{"name":"gateway-bench","acl":{"pub":["berth-load/#"],"sub":["berth-load/#"]}}')
user=$(printf '%s' "$cred" | sed -n 's/.*"username":"\([^"]*\)".*/\1/p')
pass=$(printf '%s' "$cred" | sed -n 's/.*"password":"\([^"]*\)".*/\1/p')
[ -n "$user" ] && [ -n "$pass" ] || die "could not make a credential: $cred"

only='^(ingest-q0-64|ingest-q1-64|latency-1k)$'
BENCH_BROKERS=${BENCH_BROKERS:-berth} bench/run.sh -only "$only" \
	-gateway "$MQTT_ADDR" -gateway-user "$user" -gateway-pass "$pass" "$@"
