#!/usr/bin/env bash
# `make run`: the whole Berth stack on this machine. Brings up the private
# Postgres and Redis, applies migrations, builds and starts every Berth
# process that exists, prints where each listens and, once the API and the
# gateway are up, a ready-to-use demo MQTT credential (also written to
# .run/demo.env). Ctrl-C stops everything it started (Postgres and Redis
# too, when this run started them) and exits 0; the data stays in .run/ for
# the next run. Every port is checked before anything starts: a taken one
# is named with the variable that moves it, and the run stops (exit 1).
#
# BERTH_NODES=3 make run starts three broker nodes replicating every tenant
# (docs/replication.md): dev-node-1..3, node i on BERTH_NODE_MQTT,
# BERTH_NODE_ADMIN and BERTH_NODE_PEER with 10*(i-1) added to each port,
# data in .run/nodes/<node-id>/, pid files .run/nodes/<node-id>.pid.
#
# BERTH_HANDOFF=1 (one node only) has the gateway hand plain-TCP devices'
# sockets to the node (-handoff-dir .run/handoff, the node's -handoff-listen
# there) instead of relaying them (docs/operations.md, "Socket handoff").
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$BERTH_ROOT"

# On a terminal, the stack runs as a job of its own in the foreground, so
# Ctrl-C reaches it and not make: make then ends with the stack's status
# (0 after a clean stop), not "Error 130".
if [ -t 0 ] && [ -z "${BERTH_RUN_JOB:-}" ]; then
	set -m
	BERTH_RUN_JOB=1 "$0" "$@" &
	fg %1 >/dev/null
	exit
fi

API_ADDR=${BERTH_API_LISTEN:-127.0.0.1:8080}
MQTT_ADDR=${BERTH_MQTT_LISTEN:-127.0.0.1:1883}
WS_ADDR=${BERTH_WS_LISTEN:-127.0.0.1:8083}
NODE_MQTT=${BERTH_NODE_MQTT:-127.0.0.1:7883}
NODE_ADMIN=${BERTH_NODE_ADMIN:-127.0.0.1:7880}
NODE_PEER=${BERTH_NODE_PEER:-127.0.0.1:7881}
NODES=${BERTH_NODES:-1}
[[ $NODES =~ ^[1-9]$ ]] || die "BERTH_NODES=$NODES: want a number of nodes from 1 to 9"
node_handoff=() gw_handoff=()
if [ -n "${BERTH_HANDOFF:-}" ]; then
	[ "$NODES" = 1 ] || die "BERTH_HANDOFF is for one node (BERTH_NODES=1)"
	mkdir -p "$BERTH_RUN_DIR/handoff"
	chmod 700 "$BERTH_RUN_DIR/handoff"
	node_handoff=(-handoff-listen "$BERTH_RUN_DIR/handoff/dev-node-1.sock")
	gw_handoff=(-handoff-dir "$BERTH_RUN_DIR/handoff")
fi
# node_addr ADDR I: ADDR with 10*(I-1) added to its port (node I's).
node_addr() { echo "${1%:*}:$((${1##*:} + 10 * ($2 - 1)))"; }
GW_METRICS=${BERTH_GATEWAY_METRICS:-127.0.0.1:9101}
API_METRICS=${BERTH_API_METRICS:-127.0.0.1:9102}
# The listen addresses are this script's to read: each process gets its
# own as a flag. Left in the environment, a name that is no flag of the
# process (BERTH_WS_LISTEN beside the gateway's -dns-listen) would have
# it warn of a misspelt variable.
unset BERTH_API_LISTEN BERTH_API_METRICS BERTH_MQTT_LISTEN BERTH_WS_LISTEN BERTH_GATEWAY_METRICS \
	BERTH_NODE_MQTT BERTH_NODE_ADMIN BERTH_NODE_PEER
BIN=$BERTH_RUN_DIR/bin
LOGS=$BERTH_RUN_DIR/logs
mkdir -p "$BIN" "$LOGS"

# Every listener, its address and the variable that moves it, checked
# before anything starts.
ports=(
	"$API_ADDR BERTH_API_LISTEN api"
	"$API_METRICS BERTH_API_METRICS api-metrics"
	"$MQTT_ADDR BERTH_MQTT_LISTEN gateway-mqtt"
	"$WS_ADDR BERTH_WS_LISTEN gateway-websocket"
	"$GW_METRICS BERTH_GATEWAY_METRICS gateway-metrics"
	"$NODE_MQTT BERTH_NODE_MQTT node-mqtt"
	"$NODE_ADMIN BERTH_NODE_ADMIN node-admin"
)
if [ "$NODES" -gt 1 ]; then
	ports+=("$NODE_PEER BERTH_NODE_PEER node-peer")
	for i in $(seq 2 "$NODES"); do
		ports+=("$(node_addr "$NODE_MQTT" "$i") BERTH_NODE_MQTT node$i-mqtt" "$(node_addr "$NODE_ADMIN" "$i") BERTH_NODE_ADMIN node$i-admin"
			"$(node_addr "$NODE_PEER" "$i") BERTH_NODE_PEER node$i-peer")
	done
fi
dev=$(dirname "$0")
pg_ours=; redis_ours=
"$dev/postgres.sh" status >/dev/null 2>&1 && pg_ours=running || ports+=("127.0.0.1:$BERTH_PG_PORT BERTH_PG_PORT postgres")
"$dev/redis.sh" status >/dev/null 2>&1 && redis_ours=running || ports+=("127.0.0.1:$BERTH_REDIS_PORT BERTH_REDIS_PORT redis")
taken=0
for p in "${ports[@]}"; do
	read -r addr var name <<<"$p"
	port=${addr##*:}
	if port_busy "$port"; then
		if [[ $var = *_PORT ]]; then hint="$var=$((port + 1))"; else hint="$var=${addr%:*}:$((port + 10000))"; fi
		log "port $port ($name, $addr) is taken by another program; move it with $var, e.g. $hint make run"
		taken=1
	fi
done
[ "$taken" = 0 ] || die "nothing started: free the port(s) above or move them (see README, Ports)"

pids=()
cleanup() {
	local status=$?
	trap - INT TERM EXIT
	log "stopping"
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -f "$BERTH_RUN_DIR"/nodes/*.pid
	# Only what this run started: a Postgres or Redis already up (make
	# dev-up, the tests) stays up.
	[ -n "$redis_ours" ] || "$dev/redis.sh" stop || true
	[ -n "$pg_ours" ] || "$dev/postgres.sh" stop || true
	exit "$status"
}
trap cleanup EXIT
trap 'exit 0' INT TERM # Ctrl-C is the way to stop: the EXIT trap stops everything, exit 0

"$dev/up.sh"
DATABASE_URL=postgres://postgres@127.0.0.1:$BERTH_PG_PORT/berth?sslmode=disable
REDIS_URL=redis://127.0.0.1:$BERTH_REDIS_PORT/1
psql_admin() { psql -q -h 127.0.0.1 -p "$BERTH_PG_PORT" -U postgres -d postgres "$@"; }
psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname='berth'" | grep -q 1 || psql_admin -c "CREATE DATABASE berth"

# Secrets shared by the processes of this local stack, made once and kept.
secrets=$BERTH_RUN_DIR/secrets.env
if [ ! -s "$secrets" ]; then
	umask 077
	printf 'BERTH_PROXY_SECRET=%s\nBERTH_NODE_TOKEN=%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$secrets"
fi
# The nodes' cluster secret, made by the first replicated run.
[ "$NODES" = 1 ] || grep -q '^BERTH_PEER_SECRET=' "$secrets" || (umask 077 && printf 'BERTH_PEER_SECRET=%s\n' "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >>"$secrets")
set -a; . "$secrets"; set +a
export DATABASE_URL REDIS_URL

log "building"
# The dashboard first: the API binary embeds web/dist.
if [ -n "${BERTH_SKIP_WEB:-}" ]; then
	log "BERTH_SKIP_WEB is set: serving the dashboard as last built in web/dist"
elif command -v npm >/dev/null; then
	make --no-print-directory -C "$BERTH_ROOT" web
else
	log "npm not found: skipping the dashboard build (the API answers 503 outside /v1)"
fi
go build -o "$BIN/" ./migrations/cmd/migrate
"$BIN/migrate" -database-url "$DATABASE_URL"
have() { [ -d "$1" ] && go build -o "$BIN/" "./$1"; }

wait_port() { # wait_port ADDR NAME: up to 30 s for a listener
	for _ in $(seq 300); do port_busy "${1##*:}" && return 0; sleep 0.1; done
	die "$2 did not start listening on $1; see $LOGS/$2.log"
}
start() { # start NAME ARGS...: runs a binary in the background, logging to .run/logs
	local name=$1; shift
	"$BIN/$name" "$@" >"$LOGS/$name.log" 2>&1 &
	pids+=($!)
}

api=; full=
have services/cmd/api && have services/cmd/berthctl && api=1
have broker/cmd/broker || die "broker/cmd/broker is missing"
# Not "-help | grep -q": grep quits at the first match, the broker then
# dies of SIGPIPE writing the rest, and pipefail makes that a failure.
broker_help=$("$BIN/broker" -help 2>&1 || true)
have gateway/cmd/gateway && [[ $broker_help == *-node-id* ]] && full=1

if [ -n "$api" ]; then
	# -dev: this local stack may keep its signing keys unsealed (anywhere
	# else the API wants -key-encryption-key). -open-plans: it is a dev
	# stack, so every account may put tenants on every plan (elsewhere
	# only free is open until billing entitles an account to more);
	# bench/gateway.sh moves the demo tenant to business.
	start api -dev -listen "$API_ADDR" -metrics-listen "$API_METRICS" -database-url "$DATABASE_URL" \
		-mqtt-addr "$MQTT_ADDR" -mqtt-ws-url "ws://$WS_ADDR/mqtt" -log-format text -secure-cookies=false \
		-open-plans free,pro,business
	wait_port "$API_ADDR" api
	echo "  api        http://$API_ADDR  (REST at /v1, health at /healthz)  metrics http://$API_METRICS/metrics"
	# The billing worker (docs/billing.md): meters and invoice drafts every
	# 10 s here (1 min by default), payment disabled.
	if have billing/cmd/billing; then
		start billing -database-url "$DATABASE_URL" -interval 10s -log-format text
		echo "  billing    worker: drafts at GET /v1/invoices  (log $LOGS/billing.log)"
	fi
fi
# The node after the API, so its first JWKS fetch finds the keys. Its
# readiness is its admin (HTTP) port: a bare connection to its MQTT port,
# which wants a PROXY header first, would be logged as refused.
if [ -n "$full" ] && [ "$NODES" = 1 ]; then
	start broker -node-id dev-node-1 -internal-listen "$NODE_MQTT" -admin-listen "$NODE_ADMIN" \
		-data "$BERTH_RUN_DIR/node-data" -database-url "$DATABASE_URL" \
		-jwks-url "http://$API_ADDR/v1/.well-known/jwks.json" ${node_handoff[@]+"${node_handoff[@]}"}
	wait_port "$NODE_ADMIN" broker
elif [ -n "$full" ]; then
	# Replicating nodes: each lists the others in -peers, one zone each;
	# BERTH_PEER_SECRET (secrets.env) authenticates them to one another.
	mkdir -p "$BERTH_RUN_DIR/nodes"
	for i in $(seq "$NODES"); do
		peers=
		for j in $(seq "$NODES"); do
			[ "$j" = "$i" ] || peers+="${peers:+,}dev-node-$j=$(node_addr "$NODE_PEER" "$j")@z$j"
		done
		id=dev-node-$i
		"$BIN/broker" -node-id "$id" -internal-listen "$(node_addr "$NODE_MQTT" "$i")" -admin-listen "$(node_addr "$NODE_ADMIN" "$i")" \
			-data "$BERTH_RUN_DIR/nodes/$id" -database-url "$DATABASE_URL" -jwks-url "http://$API_ADDR/v1/.well-known/jwks.json" \
			-peers "$peers" -peer-listen "$(node_addr "$NODE_PEER" "$i")" -zone "z$i" >"$LOGS/$id.log" 2>&1 &
		pids+=($!)
		echo $! >"$BERTH_RUN_DIR/nodes/$id.pid"
	done
	for i in $(seq "$NODES"); do wait_port "$(node_addr "$NODE_ADMIN" "$i")" "dev-node-$i"; done
fi
if [ -n "$full" ] && [ -n "$api" ]; then
	start gateway -gateway-id dev-gw-1 -listen "$MQTT_ADDR" -listen-ws "$WS_ADDR" -listen-tls "" -listen-wss "" \
		-metrics-listen "$GW_METRICS" -trace-sample 1 -jwks-url "http://$API_ADDR/v1/.well-known/jwks.json" \
		-database-url "$DATABASE_URL" -redis-url "$REDIS_URL" -log-format text ${gw_handoff[@]+"${gw_handoff[@]}"}
	wait_port "$MQTT_ADDR" gateway
	if [ "$NODES" = 1 ]; then
		echo "  node       mqtt $NODE_MQTT (PROXY v2 only), admin http://$NODE_ADMIN"
	else
		for i in $(seq "$NODES"); do
			echo "  dev-node-$i mqtt $(node_addr "$NODE_MQTT" "$i") (PROXY v2 only), admin http://$(node_addr "$NODE_ADMIN" "$i"), peer $(node_addr "$NODE_PEER" "$i"), pid file $BERTH_RUN_DIR/nodes/dev-node-$i.pid"
		done
	fi
	echo "  gateway    mqtt://$MQTT_ADDR  ws://$WS_ADDR/mqtt  metrics http://$GW_METRICS/metrics"
else
	# Without the API the broker runs standalone and anonymous.
	start broker -listen "$MQTT_ADDR" -ws-listen "$WS_ADDR" -allow-anonymous -data "$BERTH_RUN_DIR/standalone-data"
	wait_port "$MQTT_ADDR" broker
	echo "  broker     mqtt://$MQTT_ADDR  ws://$WS_ADDR/mqtt  (standalone, anonymous)"
fi
echo "  postgres   $DATABASE_URL"
echo "  redis      $REDIS_URL"

demo=$BERTH_RUN_DIR/demo.env
if [ -n "$full" ] && [ -n "$api" ]; then
	# The demo's API key lives with this stack's data, not in ~/.config.
	(umask 077 && BERTH_CONFIG="$BERTH_RUN_DIR/berthctl.json" "$BIN/berthctl" demo -api "http://$API_ADDR" >"$demo")
	. "$demo"
	h=${BERTH_MQTT_ADDR%:*} p=${BERTH_MQTT_ADDR##*:}
	echo
	echo "Demo tenant $BERTH_TENANT_ID; its device credential may use demo/# (all in $demo):"
	echo "  . $demo"
	echo "  mosquitto_sub -h $h -p $p -u \"\$BERTH_MQTT_USERNAME\" -P \"\$BERTH_MQTT_PASSWORD\" -t 'demo/#' -v"
	echo "  mosquitto_pub -h $h -p $p -u \"\$BERTH_MQTT_USERNAME\" -P \"\$BERTH_MQTT_PASSWORD\" -t demo/hello -m hi"
	echo "  curl -H \"Authorization: Bearer \$BERTH_API_KEY\" http://$API_ADDR/v1/tenants/\$BERTH_TENANT_ID/sessions"
	echo
	echo "Your own account and tenant with berthctl (README, \"Your own tenant with berthctl\"):"
	echo "  export PATH=$BIN:\$PATH BERTH_API_URL=http://$API_ADDR"
	echo "  berthctl signup --email you@example.com"
	echo
	echo "Dashboard: http://$API_ADDR  (log in as demo@berth.localhost / ${BERTH_DEMO_PASSWORD:-berth-demo-password})"
else
	printf 'BERTH_MQTT_ADDR=%s\n' "$MQTT_ADDR" >"$demo"
	echo
	echo "Try it:"
	echo "  mosquitto_sub -h ${MQTT_ADDR%:*} -p ${MQTT_ADDR##*:} -t 'demo/#' -v"
	echo "  mosquitto_pub -h ${MQTT_ADDR%:*} -p ${MQTT_ADDR##*:} -t demo/hello -m hi"
fi
echo
echo "Logs in $LOGS. Ctrl-C stops everything."
wait -n "${pids[@]}" || true
die "a process exited; see $LOGS"
