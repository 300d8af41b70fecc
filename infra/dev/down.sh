#!/usr/bin/env bash
# Stops the private Postgres and Redis; their data stays for the next start.
set -uo pipefail
d=$(dirname "$0")
"$d/redis.sh" stop
"$d/postgres.sh" stop
