#!/usr/bin/env bash
# Private Redis for development and tests: its own port (default 63790), no
# persistence, never the system instance. Installs redis-server when missing.
# Usage: redis.sh start|stop|status|url
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DIR=$BERTH_RUN_DIR/redis
PID=$DIR/redis.pid
running() { [ -s "$PID" ] && kill -0 "$(cat "$PID")" 2>/dev/null; }

case ${1:-status} in
start)
	command -v redis-server >/dev/null || apt_install redis-server
	if running; then log "redis already running on 127.0.0.1:$BERTH_REDIS_PORT"; exit 0; fi
	port_busy "$BERTH_REDIS_PORT" && die "port $BERTH_REDIS_PORT is taken by another program; set BERTH_REDIS_PORT"
	mkdir -p "$DIR"
	redis-server --bind 127.0.0.1 --port "$BERTH_REDIS_PORT" --save '' --appendonly no \
		--daemonize yes --pidfile "$PID" --logfile "$DIR/redis.log" --dir "$DIR"
	for _ in $(seq 100); do port_busy "$BERTH_REDIS_PORT" && break; sleep 0.1; done
	port_busy "$BERTH_REDIS_PORT" || die "redis did not start; see $DIR/redis.log"
	log "redis up on 127.0.0.1:$BERTH_REDIS_PORT"
	;;
stop)
	if running; then
		pid=$(cat "$PID"); kill "$pid"
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		log "redis stopped"
	fi
	rm -f "$PID"
	;;
status) running && echo "running (pid $(cat "$PID"))" || { echo "stopped"; exit 3; } ;;
url) echo "redis://127.0.0.1:$BERTH_REDIS_PORT/0" ;;
*) die "usage: $0 start|stop|status|url" ;;
esac
