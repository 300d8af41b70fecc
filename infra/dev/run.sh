#!/usr/bin/env bash
# `make run`: the whole Berth stack on this machine. Brings up the private
# Postgres and Redis, applies migrations, builds and starts every Berth
# process that exists, prints where each listens and, once the API and the
# gateway are up, a ready-to-use demo MQTT credential (also written to
# .run/demo.env). Ctrl-C stops everything it started, Postgres and Redis
# included; the data stays in .run/ for the next run.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$BERTH_ROOT"

API_ADDR=${BERTH_API_LISTEN:-127.0.0.1:8080}
MQTT_ADDR=${BERTH_MQTT_LISTEN:-127.0.0.1:1883}
WS_ADDR=${BERTH_WS_LISTEN:-127.0.0.1:8083}
NODE_MQTT=${BERTH_NODE_MQTT:-127.0.0.1:7883}
NODE_ADMIN=${BERTH_NODE_ADMIN:-127.0.0.1:7880}
GW_METRICS=${BERTH_GATEWAY_METRICS:-127.0.0.1:9101}
API_METRICS=${BERTH_API_METRICS:-127.0.0.1:9102}
BIN=$BERTH_RUN_DIR/bin
LOGS=$BERTH_RUN_DIR/logs
mkdir -p "$BIN" "$LOGS"

pids=()
cleanup() {
	trap - INT TERM EXIT
	log "stopping"
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	"$(dirname "$0")/down.sh" || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM # the EXIT trap stops everything

"$(dirname "$0")/up.sh"
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
set -a; . "$secrets"; set +a
export DATABASE_URL REDIS_URL

log "building"
# The dashboard first: the API binary embeds web/dist.
if command -v npm >/dev/null; then
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
have gateway/cmd/gateway && "$BIN/broker" -help 2>&1 | grep -q -- '-node-id' && full=1

if [ -n "$full" ]; then
	start broker -node-id dev-node-1 -internal-listen "$NODE_MQTT" -admin-listen "$NODE_ADMIN" \
		-data "$BERTH_RUN_DIR/node-data" -database-url "$DATABASE_URL" \
		-jwks-url "http://$API_ADDR/v1/.well-known/jwks.json"
	wait_port "$NODE_MQTT" broker
fi
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
fi
if [ -n "$full" ] && [ -n "$api" ]; then
	start gateway -gateway-id dev-gw-1 -listen "$MQTT_ADDR" -listen-ws "$WS_ADDR" -listen-tls "" -listen-wss "" \
		-metrics-listen "$GW_METRICS" -trace-sample 1 -jwks-url "http://$API_ADDR/v1/.well-known/jwks.json" \
		-database-url "$DATABASE_URL" -redis-url "$REDIS_URL" -log-format text
	wait_port "$MQTT_ADDR" gateway
	echo "  node       mqtt $NODE_MQTT (PROXY v2 only), admin http://$NODE_ADMIN"
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
	(umask 077 && "$BIN/berthctl" demo -api "http://$API_ADDR" >"$demo")
	. "$demo"
	h=${BERTH_MQTT_ADDR%:*} p=${BERTH_MQTT_ADDR##*:}
	echo
	echo "Demo tenant $BERTH_TENANT_ID; its device credential may use demo/# (all in $demo):"
	echo "  . $demo"
	echo "  mosquitto_sub -h $h -p $p -u \"\$BERTH_MQTT_USERNAME\" -P \"\$BERTH_MQTT_PASSWORD\" -t 'demo/#' -v"
	echo "  mosquitto_pub -h $h -p $p -u \"\$BERTH_MQTT_USERNAME\" -P \"\$BERTH_MQTT_PASSWORD\" -t demo/hello -m hi"
	echo "  curl -H \"Authorization: Bearer \$BERTH_API_KEY\" http://$API_ADDR/v1/tenants/\$BERTH_TENANT_ID/sessions"
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
log "a process exited; see $LOGS"
