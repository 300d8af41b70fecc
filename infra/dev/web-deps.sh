#!/usr/bin/env bash
# Installs what the dashboard's build and tests use beyond Go: its npm
# packages (npm ci in web/, when node_modules is missing or older than
# package-lock.json) and Debian's chromium for the browser tests. Node and
# npm must already be on the machine. Idempotent.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
web=$BERTH_ROOT/web
command -v npm >/dev/null || die "npm is missing: install Node.js 20 or later"
# npm records every install in node_modules/.package-lock.json, so its age is
# the age of node_modules (the folder's own mtime moves with any npm install).
stamp=$web/node_modules/.package-lock.json
if [ ! -e "$stamp" ] || [ "$web/package-lock.json" -nt "$stamp" ]; then
	log "installing the dashboard's npm packages (npm ci in web/)"
	(cd "$web" && npm ci --no-audit --no-fund)
	touch "$stamp"
fi
[ -x /usr/bin/chromium ] || apt_install chromium
