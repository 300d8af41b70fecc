#!/usr/bin/env bash
# helm.sh [ARGS...]: runs the pinned Helm (the chart's offline validation,
# infra/helm), installing it into GOBIN with `go install` when it is missing
# or another version. Helm is served as a Go module, so no binary is
# downloaded; the build is cached in GOCACHE, and an installed binary of the
# right version is reused as it is. Without ARGS it only installs.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
version=v3.22.0
bin=$(go env GOBIN)
bin=${bin:-$(go env GOPATH)/bin}/helm
# The module version recorded in the binary (helm's own `version` says only
# v3.22 when built by go install).
installed() { go version -m "$bin" 2>/dev/null | awk '$1 == "mod" && $2 == "helm.sh/helm/v3" {print $3}'; }
if ! [ -x "$bin" ] || [ "$(installed)" != "$version" ]; then
	log "installing helm $version (go install; the first build takes a few minutes)"
	GOWORK=off go install "helm.sh/helm/v3/cmd/helm@$version"
fi
[ $# -eq 0 ] && exit 0
exec "$bin" "$@"
