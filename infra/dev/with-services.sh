#!/usr/bin/env bash
# with-services.sh CMD...: runs CMD with the private Postgres and Redis up
# (up.sh) and Stripe's stripe-mock (stripe-mock.sh; its URL exported as
# BERTH_TEST_STRIPE_URL), then stops whichever of them this run started, so
# `make test` leaves the machine as it found it: a Postgres, Redis or
# stripe-mock already running (make dev-up, make run) stays up. Exits with CMD's status.
set -uo pipefail
d=$(dirname "$0")
pg_was=; redis_was=; stripe_was=
"$d/postgres.sh" status >/dev/null 2>&1 && pg_was=1
"$d/redis.sh" status >/dev/null 2>&1 && redis_was=1
"$d/stripe-mock.sh" status >/dev/null 2>&1 && stripe_was=1
stop_started() {
	[ -n "$stripe_was" ] || "$d/stripe-mock.sh" stop
	[ -n "$redis_was" ] || "$d/redis.sh" stop
	[ -n "$pg_was" ] || "$d/postgres.sh" stop
}
trap stop_started EXIT
trap 'exit 130' INT TERM
"$d/up.sh" || exit
"$d/stripe-mock.sh" start || exit
BERTH_TEST_STRIPE_URL=${BERTH_TEST_STRIPE_URL:-$("$d/stripe-mock.sh" url)}
export BERTH_TEST_STRIPE_URL
"$@"
