#!/usr/bin/env bash
# Stripe's own stripe-mock (the API's OpenAPI spec and fixtures; stateless)
# for the payment tests: a private port (default 63792), HTTP on 127.0.0.1.
# Installs it with `go install` when missing. Tests read its URL from
# BERTH_TEST_STRIPE_URL (with-services.sh exports it).
# Usage: stripe-mock.sh start|stop|status|url
set -euo pipefail
. "$(dirname "$0")/lib.sh"

STRIPE_MOCK_VERSION=v0.203.0
DIR=$BERTH_RUN_DIR/stripe-mock
PID=$DIR/stripe-mock.pid
BIN=$(go env GOPATH)/bin/stripe-mock
running() { [ -s "$PID" ] && kill -0 "$(cat "$PID")" 2>/dev/null; }

case ${1:-status} in
start)
	if ! go version -m "$BIN" 2>/dev/null | grep -q "mod.*github.com/stripe/stripe-mock.*$STRIPE_MOCK_VERSION"; then
		log "installing stripe-mock $STRIPE_MOCK_VERSION"
		go install "github.com/stripe/stripe-mock@$STRIPE_MOCK_VERSION"
	fi
	if running; then log "stripe-mock already running on 127.0.0.1:$BERTH_STRIPE_MOCK_PORT"; exit 0; fi
	port_busy "$BERTH_STRIPE_MOCK_PORT" && die "port $BERTH_STRIPE_MOCK_PORT is taken by another program; set BERTH_STRIPE_MOCK_PORT"
	mkdir -p "$DIR"
	# It also serves HTTPS, on :12112 unless told: a port of its own, or a
	# second instance (a test's) dies on the first one's.
	nohup "$BIN" -http-addr "127.0.0.1:$BERTH_STRIPE_MOCK_PORT" -https-addr 127.0.0.1: >"$DIR/stripe-mock.log" 2>&1 &
	echo $! >"$PID"
	# It loads Stripe's whole OpenAPI document first: seconds on a busy machine.
	for _ in $(seq 600); do
		port_busy "$BERTH_STRIPE_MOCK_PORT" && break
		kill -0 "$(cat "$PID")" 2>/dev/null || break
		sleep 0.1
	done
	port_busy "$BERTH_STRIPE_MOCK_PORT" || die "stripe-mock did not start; see $DIR/stripe-mock.log"
	log "stripe-mock up on 127.0.0.1:$BERTH_STRIPE_MOCK_PORT"
	;;
stop)
	if running; then
		pid=$(cat "$PID"); kill "$pid"
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		log "stripe-mock stopped"
	fi
	rm -f "$PID"
	;;
status) running && echo "running (pid $(cat "$PID"))" || { echo "stopped"; exit 3; } ;;
url) echo "http://127.0.0.1:$BERTH_STRIPE_MOCK_PORT" ;;
*) die "usage: $0 start|stop|status|url" ;;
esac
