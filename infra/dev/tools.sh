#!/usr/bin/env bash
# Installs what the tests and benchmarks use beyond Go: real MQTT peers
# (mosquitto, mosquitto_pub/sub), strace (the syscall-counting tests that
# prove sendfile and splice) and poppler-utils (pdftotext: the invoice PDF
# tests read the text back with another program than the one that wrote it).
# Idempotent.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
apt_install mosquitto mosquitto-clients strace poppler-utils
# nats-server: make bench's fourth peer (it speaks MQTT through JetStream).
apt_install nats-server
# zsh and fish: berthctl's completion scripts are run in the shells they are for.
apt_install zsh fish
# The e2e disk and flood faults (root, as in CI): mount and losetup (a tmpfs and an
# ext4 on a loop device for the node's -data), mkfs.ext4, ip (the flood's network namespace);
# chattr (e2fsprogs) makes a file no deletion can remove for the node's removed-replica test.
apt_install mount e2fsprogs iproute2
# setpriv: the gateway's SYN-filter test runs its binary as root with CAP_BPF alone,
# as the chart's gateway.synFilter pod does.
apt_install util-linux
# helm (pinned, built from its Go module): the chart's offline validation
# (infra/helm/chartcheck).
"$(dirname "$0")/helm.sh"
