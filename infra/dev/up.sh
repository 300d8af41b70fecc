#!/usr/bin/env bash
# Brings up everything the tests and the local stack need. Idempotent.
set -euo pipefail
d=$(dirname "$0")
"$d/tools.sh"
"$d/redis.sh" start
"$d/postgres.sh" start
