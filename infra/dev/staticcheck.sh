#!/usr/bin/env bash
# Runs staticcheck, installing the pinned version into GOBIN when missing.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
version=v0.8.2
bin=$(go env GOPATH)/bin/staticcheck
if ! [ -x "$bin" ] || ! "$bin" -version 2>/dev/null | grep -q "${version#v}"; then
	log "installing staticcheck $version"
	go install "honnef.co/go/tools/cmd/staticcheck@$version"
fi
cd "$BERTH_ROOT"
exec "$bin" "$@"
