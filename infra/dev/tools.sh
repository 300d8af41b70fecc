#!/usr/bin/env bash
# Installs what the tests and benchmarks use beyond Go: real MQTT peers
# (mosquitto, mosquitto_pub/sub) and strace (the syscall-counting tests that
# prove sendfile and splice). Idempotent.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
apt_install mosquitto mosquitto-clients strace
# helm (pinned, built from its Go module): the chart's offline validation
# (infra/helm/chartcheck).
"$(dirname "$0")/helm.sh"
