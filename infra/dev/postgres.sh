#!/usr/bin/env bash
# Private Postgres for development and tests: its own data folder and port
# (default 54329), never the system cluster. Usage: postgres.sh start|stop|status|url
set -euo pipefail
. "$(dirname "$0")/lib.sh"

pgbin() {
	local b
	b=$(command -v pg_ctl 2>/dev/null || true)
	[ -n "$b" ] && { dirname "$(readlink -f "$b")"; return; }
	for d in /usr/lib/postgresql/*/bin; do [ -x "$d/pg_ctl" ] && { echo "$d"; return; }; done
	die "Postgres server binaries not found (apt-get install postgresql)"
}
BIN=$(pgbin)
as_pg() { if is_root; then runuser -u postgres -- "$@"; else "$@"; fi; }

# Postgres refuses to run as root, so as root the cluster belongs to the postgres
# user; if that user cannot reach .run/ (a checkout under /root, say) the cluster
# lives in a folder of its own under /var/tmp, keyed by the checkout's path.
datadir() {
	local dir=$BERTH_RUN_DIR/pg
	if is_root; then
		mkdir -p "$dir"
		chown postgres "$dir"
		if ! runuser -u postgres -- test -w "$dir"; then
			dir=/var/tmp/berth-pg-$(printf '%s' "$BERTH_ROOT" | md5sum | cut -c1-8)
			mkdir -p "$dir"
			chown postgres "$dir"
		fi
	else
		mkdir -p "$dir"
	fi
	echo "$dir"
}

cmd=${1:-status}
DIR=$(datadir)
DATA=$DIR/data
case $cmd in
start)
	if as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then log "postgres already running on 127.0.0.1:$BERTH_PG_PORT"; exit 0; fi
	port_busy "$BERTH_PG_PORT" && die "port $BERTH_PG_PORT is taken by another program; set BERTH_PG_PORT"
	if [ ! -s "$DATA/PG_VERSION" ]; then
		log "initdb $DATA"
		as_pg "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --no-sync >/dev/null
	fi
	# Dev and test settings: durability off for speed (this cluster holds nothing precious).
	as_pg "$BIN/pg_ctl" -D "$DATA" -l "$DIR/postgres.log" -w -t 60 -o "-p $BERTH_PG_PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400" start >/dev/null
	log "postgres up on 127.0.0.1:$BERTH_PG_PORT (data $DATA)"
	;;
stop)
	if as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
		as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
		log "postgres stopped"
	fi
	;;
status) as_pg "$BIN/pg_ctl" -D "$DATA" status ;;
url) echo "postgres://postgres@127.0.0.1:$BERTH_PG_PORT/postgres?sslmode=disable" ;;
*) die "usage: $0 start|stop|status|url" ;;
esac
