#!/usr/bin/env bash
# make bench-repl: what replication costs, R3 against R1 in one run.
# Starts the stack as `BERTH_NODES=3 make run` does (Postgres, Redis, API,
# three replicating node processes with production Raft timing, each with
# -data and the same -fsync policy, one gateway), takes two tenants of the
# demo account — bench-repl-r1 on the free plan (its group has 1 voter)
# and bench-repl-r3 on pro (3 voters) —, gives both the same quotas, high
# enough that none throttles the load, waits until each group has elected a
# leader with that many voters, and runs `runner repl` through the
# gateway: QoS 1 ingest with the nodes' CPU per million messages, and QoS 1
# latency at 1,000 msg/s, alternating R1 and R3 for 5 rounds. Writes
# bench/results/<date>-repl.md and .json. Stops the stack afterwards
# (Postgres and Redis too, when it started them).
#
#   bench/repl.sh                       # 5 rounds of 5 s runs, about 4 minutes
#   bench/repl.sh -quick                # 2 rounds of 1 s runs, a smoke run
#   bench/repl.sh -rounds 9 -duration 10s
#   BENCH_FSYNC=always bench/repl.sh    # every node's raft log with -fsync always
#   BENCH_OUT=/tmp/x bench/repl.sh -quick   # results elsewhere
# Other flags go to `runner repl` (bench/runner/repl.go, see -h there).
#
# The tenants and their data stay in the dev stack (.run/, database berth)
# and are used again by the next run; a credential is made per run and
# revoked at the end. The quotas are written in Postgres directly (and
# announced on berth_quotas, as the API does): the free plan's bounds
# (200 msg/s) would otherwise be what R1 measures.
set -euo pipefail
cd "$(dirname "$0")/.."
. infra/dev/lib.sh

MQTT_ADDR=${BERTH_MQTT_LISTEN:-127.0.0.1:1883}
port_busy "${MQTT_ADDR##*:}" && die "something already listens on $MQTT_ADDR: stop it (make run?) first"
fsync=${BENCH_FSYNC:-interval}
out=${BENCH_OUT:-bench/results}
case $fsync in always | interval | never) ;; *) die "BENCH_FSYNC=$fsync: want always, interval or never" ;; esac

bin="$(mktemp -d -t berth-bench-repl.XXXXXX)"
stack_log="$bin/stack.log"
log "building"
go build -o "$bin/loadtest" ./broker/cmd/loadtest
go build -o "$bin/runner" ./bench/runner

# A session of its own, so that the whole stack is stopped as a group.
# BERTH_FSYNC reaches the three nodes (and nothing else reads it); the
# dashboard is not needed, so it is not rebuilt.
# Placement rows older than this are the previous run's leaders.
started=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)
BERTH_NODES=3 BERTH_FSYNC=$fsync BERTH_SKIP_WEB=1 setsid infra/dev/run.sh >"$stack_log" 2>&1 &
stack=$!
creds=()
stop_stack() {
	for c in "${creds[@]}"; do api DELETE "/v1/tenants/$c" '' >/dev/null 2>&1 || true; done
	kill -INT -- "-$stack" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$stack" 2>/dev/null || break; sleep 0.1; done
	rm -rf "$bin"
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
ln -s "$BERTH_RUN_DIR/bin/broker" "$bin/broker" # its version goes into the results

api() { # api METHOD PATH BODY
	curl -fsS -X "$1" -H "Authorization: Bearer $BERTH_API_KEY" -H 'Content-Type: application/json' \
		${3:+-d "$3"} "$BERTH_API_URL$2"
}
sql() { psql -q -X -v ON_ERROR_STOP=1 -tA -h 127.0.0.1 -p "$BERTH_PG_PORT" -U postgres -d berth "$@"; }

# tenant SLUG PLAN: the demo account's tenant of that slug, made on PLAN if
# there is none; prints its id.
tenant() {
	local id plan
	IFS='|' read -r id plan <<<"$(sql -c "SELECT id, plan FROM tenants WHERE slug = '$1'")"
	if [ -z "$id" ]; then
		id=$(api POST /v1/tenants "{\"slug\":\"$1\",\"plan\":\"$2\"}" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
		[ -n "$id" ] || die "could not make tenant $1"
		plan=$2
	fi
	[ "$plan" = "$2" ] || die "tenant $1 is on plan $plan, not $2: delete it (berthctl) or move it back"
	echo "$id"
}
r1=$(tenant bench-repl-r1 free)
r3=$(tenant bench-repl-r3 pro)

# The same quotas for both, none of them a limit for this load: rates,
# in-flight window and monthly messages at the business plan's bounds;
# retention equal (the free plan's bound, 128 MiB) so that both logs are
# trimmed alike and the dev stack's disk stays bounded.
sql >/dev/null <<SQL
BEGIN;
UPDATE quotas SET max_connections = 100000, max_msgs_per_sec = 10000000, max_bytes_per_sec = 10737418240,
	client_msgs_per_sec = 1000000, client_bytes_per_sec = 1073741824, max_inflight = 65535,
	max_queued_bytes = 1073741824, monthly_messages = 1000000000000, retention_bytes = 134217728,
	retention_seconds = 86400, updated_at = now()
WHERE tenant_id IN ('$r1', '$r3');
SELECT pg_notify('berth_quotas', '$r1'), pg_notify('berth_quotas', '$r3');
COMMIT;
SQL


# placement TENANT: "leader voters epoch" from tenant_placement, as a
# leader of this stack recorded it (empty before).
placement() {
	sql -F ' ' -c "SELECT leader, cardinality(replicas), epoch FROM tenant_placement
		WHERE tenant_id = '$1' AND leader IS NOT NULL AND updated_at > '$started'"
}
# wait_group TENANT VOTERS: until the tenant's group has elected a leader
# in this stack and has that many voters (the nodes open a new tenant's
# group within 5 s; a known one's election follows their start).
wait_group() {
	local p
	for _ in $(seq 600); do
		p=$(placement "$1")
		[ -n "$p" ] && [ "$(echo "$p" | cut -d' ' -f2)" = "$2" ] && { echo "$p"; return; }
		sleep 0.1
	done
	die "tenant $1: no leader with $2 voters within 60 s (placement: ${p:-none})"
}
p1=$(wait_group "$r1" 1)
p3=$(wait_group "$r3" 3)
log "R1 $r1: leader, voters, epoch: $p1; R3 $r3: $p3"

credential() { # credential TENANT: "id user pass" of a new device credential for the load's topics
	local c
	c=$(api POST "/v1/tenants/$1/credentials" '{"name":"bench-repl","acl":{"pub":["berth-load/#"],"sub":["berth-load/#"]}}')
	printf '%s %s %s\n' "$(printf '%s' "$c" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')" \
		"$(printf '%s' "$c" | sed -n 's/.*"username":"\([^"]*\)".*/\1/p')" "$(printf '%s' "$c" | sed -n 's/.*"password":"\([^"]*\)".*/\1/p')"
}
read -r c1 u1 w1 <<<"$(credential "$r1")"
creds+=("$r1/credentials/$c1")
read -r c3 u3 w3 <<<"$(credential "$r3")"
creds+=("$r3/credentials/$c3")
[ -n "$w1" ] && [ -n "$w3" ] || die "could not make the credentials"

pids=
for i in 1 2 3; do pids+="${pids:+,}$(cat "$BERTH_RUN_DIR/nodes/dev-node-$i.pid")"; done
note() { # note TENANT SLUG PLAN PLACEMENT
	local leader voters epoch
	read -r leader voters epoch <<<"$4"
	echo "tenant $2 ($1), plan $3: $voters voter(s), leader $leader at epoch $epoch; quotas raised alike for both (no rate, in-flight or monthly limit reached; retention 128 MiB)"
}
BERTH_REPL_R1_USER=$u1 BERTH_REPL_R1_PASS=$w1 BERTH_REPL_R3_USER=$u3 BERTH_REPL_R3_PASS=$w3 \
	"$bin/runner" repl -bin "$bin" -out "$out" -addr "$MQTT_ADDR" -pids "$pids" -fsync "$fsync" \
	-r1-note "$(note "$r1" bench-repl-r1 free "$p1")" -r3-note "$(note "$r3" bench-repl-r3 pro "$p3")" "$@"

# A leader that moved during the run would have put a failover in it.
md=$(ls -t "$out"/*-repl.md | head -1)
e1=$(placement "$r1") e3=$(placement "$r3")
if [ "$e1" = "$p1" ] && [ "$e3" = "$p3" ]; then
	printf '\nPlacement at the end: unchanged (no election during the run).\n' >>"$md"
else
	printf '\nPlacement at the end: **moved** (R1 %s → %s, R3 %s → %s): an election happened during the run.\n' "$p1" "$e1" "$p3" "$e3" >>"$md"
	log "a leader moved during the run: R1 $p1 -> $e1, R3 $p3 -> $e3"
fi
log "results in $md"
