#!/usr/bin/env bash
# with-services.sh CMD...: runs CMD with the private Postgres and Redis up
# (up.sh), then stops whichever of them this run started, so `make test`
# leaves the machine as it found it: a Postgres or Redis already running
# (make dev-up, make run) stays up. Exits with CMD's status.
set -uo pipefail
d=$(dirname "$0")
pg_was=; redis_was=
"$d/postgres.sh" status >/dev/null 2>&1 && pg_was=1
"$d/redis.sh" status >/dev/null 2>&1 && redis_was=1
stop_started() {
	[ -n "$redis_was" ] || "$d/redis.sh" stop
	[ -n "$pg_was" ] || "$d/postgres.sh" stop
}
trap stop_started EXIT
trap 'exit 130' INT TERM
"$d/up.sh" || exit
"$@"
