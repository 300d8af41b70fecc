#!/usr/bin/env bash
# make bench: Berth's standalone broker side by side with mosquitto,
# mochi-mqtt and NATS (its MQTT listener) on loopback, the same loadtest
# scenarios against each in one run.
# Writes bench/results/<date>.md (the table) and <date>.json (raw reports).
#
#   bench/run.sh                      # full run, about 5 minutes
#   bench/run.sh -quick               # 1 s scenarios, a smoke test
#   bench/run.sh -only 'ingest|sweep' # a subset of scenario ids
#   BENCH_BROKERS=mosquitto,mochi bench/run.sh   # without Berth
#   bench/run.sh -gateway HOST:PORT -gateway-user ID -gateway-pass TOKEN
#                                     # also through a running gateway
# Other flags go to bench/runner (see its -h).
set -euo pipefail
cd "$(dirname "$0")/.."

# 10,000 held connections need more than the usual 1,024 descriptors, for
# the load tool and for the broker (mosquitto inherits this shell's limit;
# Go programs raise their soft limit to the hard one themselves); make
# bench-idle's 100,000 need more than 100,000 (raising the hard limit takes
# CAP_SYS_RESOURCE; without it a level above the hard limit is not held).
want=262144
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$want" ]; then
	ulimit -Hn "$want" 2>/dev/null || true
fi
ulimit -n "$want" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 10240 ]; then
	echo "bench: open-file limit is $(ulimit -n); the 10,000-connection scenario needs about 10,100 per process" >&2
fi
echo "bench: open-file limit $(ulimit -n) per process" >&2

# mosquitto, the reference peer, from the distribution: installed by the
# project's tool script, which keeps apt from starting a system service on :1883.
infra/dev/tools.sh

bin="$(mktemp -d -t berth-bench-bin.XXXXXX)"
trap 'rm -rf "$bin"' EXIT
brokers="${BENCH_BROKERS:-berth,mosquitto,mochi,nats}"
echo "bench: building" >&2
go build -o "$bin/loadtest" ./broker/cmd/loadtest
go build -o "$bin/runner" ./bench/runner
go build -o "$bin/mochi" ./bench/mochi
if [[ ",$brokers," == *",berth,"* ]]; then
	if ! go build -o "$bin/broker" ./broker/cmd/broker; then
		echo "bench: Berth's broker (./broker/cmd/broker) does not build;" \
			"BENCH_BROKERS=mosquitto,mochi $0 benches the peers alone" >&2
		exit 1
	fi
fi
"$bin/runner" -bin "$bin" -out bench/results -brokers "$brokers" "$@"
