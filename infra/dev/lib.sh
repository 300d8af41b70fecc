# Shared settings for the dev scripts; sourced, not run.
# Everything lives under .run/ in the repository (gitignored) unless BERTH_RUN_DIR says otherwise.
BERTH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BERTH_RUN_DIR=${BERTH_RUN_DIR:-$BERTH_ROOT/.run}
BERTH_PG_PORT=${BERTH_PG_PORT:-54329}
BERTH_REDIS_PORT=${BERTH_REDIS_PORT:-63790}
BERTH_STRIPE_MOCK_PORT=${BERTH_STRIPE_MOCK_PORT:-63792}

log() { printf 'berth-dev: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }

# apt_install PKG...: installs Debian packages that are missing (root only), without
# letting their maintainer scripts start system services on the default ports.
apt_install() {
	local missing=()
	for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
	[ ${#missing[@]} -eq 0 ] && return 0
	is_root || die "missing packages: ${missing[*]} (install them, or run as root)"
	log "installing ${missing[*]}"
	local policy=/usr/sbin/policy-rc.d own_policy=
	if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; own_policy=1; fi
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || { [ -n "$own_policy" ] && rm -f "$policy"; die "apt-get install ${missing[*]} failed"; }
	fi
	[ -n "$own_policy" ] && rm -f "$policy"
	return 0
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
