#!/usr/bin/env bash
# bench/gateway.sh: what the hosted path costs. Starts the whole stack as
# `make run` does (Postgres, Redis, API, one node, one gateway), moves the
# demo tenant to the business plan (the dev stack opens every plan to every
# account: the API's -open-plans) so that its quotas do not throttle the
# load, makes a credential for the load tool's topics, and runs
# bench/run.sh with the standalone broker beside the `gateway` column
# (client -> gateway -> node, with JWT, ACL, quotas and the message log).
# Stops the stack afterwards, Postgres and Redis included.
#
#   bench/gateway.sh                          # QoS 0/1 ingest and latency
#   bench/gateway.sh -only '^latency-1k$'     # other scenario ids
#   BENCH_FSYNC=always bench/gateway.sh       # both logging with -fsync always
#   BERTH_HANDOFF=1 bench/gateway.sh          # the gateway hands sockets to the node (infra/dev/run.sh)
# Other flags go to bench/run.sh.
#
# Like with like: the node logs QoS 1/2 to its message log (-data), so the
# standalone broker runs with -data too, and both with the same -fsync
# policy (BENCH_FSYNC, default interval: the broker's own default).
set -euo pipefail
cd "$(dirname "$0")/.."
. infra/dev/lib.sh

MQTT_ADDR=${BERTH_MQTT_LISTEN:-127.0.0.1:1883}
port_busy "${MQTT_ADDR##*:}" && die "something already listens on $MQTT_ADDR: stop it (make run?) first"

stack_log=$(mktemp -t berth-gateway-bench.XXXXXX)
# A session of its own, so that the whole stack can be stopped as a group.
fsync=${BENCH_FSYNC:-interval}
case $fsync in always | interval | never) ;; *) die "BENCH_FSYNC=$fsync: want always, interval or never" ;; esac
# BERTH_FSYNC reaches the node (run.sh gives it no -fsync flag) and nothing
# else; the standalone broker is given -fsync by the runner (-berth-fsync).
BERTH_FSYNC=$fsync setsid infra/dev/run.sh >"$stack_log" 2>&1 &
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
		${3:+-d "$3"} "$BERTH_API_URL/v1/tenants/$BERTH_TENANT_ID$2"
}
api PATCH "" '{"plan":"business"}' >/dev/null
# A plan change only clamps quotas into the new bounds: raise each to the
# plan's maximum, so the load is not throttled by the free plan's defaults.
max=$(api GET /quotas '' | sed -n 's/.*"max":\({[^}]*}\).*/\1/p')
[ -n "$max" ] || die "could not read the plan's bounds"
api PUT /quotas "$max" >/dev/null
cred=$(api POST /credentials '{"name":"gateway-bench","acl":{"pub":["berth-load/#"],"sub":["berth-load/#"]}}')
user=$(printf '%s' "$cred" | sed -n 's/.*"username":"\([^"]*\)".*/\1/p')
pass=$(printf '%s' "$cred" | sed -n 's/.*"password":"\([^"]*\)".*/\1/p')
[ -n "$user" ] && [ -n "$pass" ] || die "could not make a credential: $cred"

# Ingest first; then the latency scenario alone, in minutes of its own, so
# that the node's latency histograms (booked per minute of its usage
# flush, every 10 s) hold only that scenario's messages.
BENCH_BROKERS=${BENCH_BROKERS:-berth}
export BENCH_BROKERS
bench/run.sh -only '^(ingest-q0-64|ingest-q1-64)$' -berth-fsync "$fsync" \
	-gateway "$MQTT_ADDR" -gateway-user "$user" -gateway-pass "$pass" "$@"
sleep 12                           # the node's last flush of the ingest load
sleep $((61 - 10#$(date -u +%S))) # to the next minute boundary
start=$(date -u +%Y-%m-%dT%H:%M:00Z)
bench/run.sh -only '^latency-1k$' -berth-fsync "$fsync" \
	-gateway "$MQTT_ADDR" -gateway-user "$user" -gateway-pass "$pass" "$@"

# What the node itself recorded for every message of the latency run
# through the gateway (GET .../latency), beside the load tool's figures in
# the table, after one more flush; one row per minute.
sleep 12
end=$(date -u -d '+1 minute' +%Y-%m-%dT%H:%M:00Z)
md=$(ls -t bench/results/*.md | head -1)
{
	echo
	echo "## Latency as the node recorded it (the gateway column's latency run, every message)"
	echo
	echo "\`GET /v1/tenants/{tid}/latency?metric=M&from=$start&to=$end&step=1m\`: the node's own histograms, merged by the API, for the minutes of this run only (the ingest runs were in earlier minutes). delivery = PUBLISH read by the node → copy written to the subscriber's socket; ack = QoS 1/2 PUBLISH read → PUBACK sent; connect = CONNECT read → CONNACK sent. The load tool's e2e figures above add the gateway's two relay hops each way and the client's own socket reads."
	echo
	echo "| metric | minute | count | p50 µs | p90 µs | p99 µs | max µs |"
	echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
	for m in delivery ack connect; do
		curl -fsS -H "Authorization: Bearer $BERTH_API_KEY" \
			"$BERTH_API_URL/v1/tenants/$BERTH_TENANT_ID/latency?metric=$m&from=$start&to=$end&step=1m" |
			tr '{' '\n' | sed -n 's/.*"t":"\([^"]*\)","count":\([0-9]*\),"p50_us":\([^,]*\),"p90_us":\([^,]*\),"p99_us":\([^,]*\),"max_us":\([^,}]*\).*/\1 \2 \3 \4 \5 \6/p' |
			while read -r t n p50 p90 p99 max; do
				[ "$n" = 0 ] || printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$m" "${t:11:5}" "$n" "$p50" "$p90" "$p99" "$max"
			done
	done
} >>"$md"
log "the node's own latency figures are appended to $md"
