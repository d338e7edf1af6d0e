#!/usr/bin/env bash
# Load benchmark of `sdflow serve` (bench/server/load.mjs): 10 clients, 200
# prompts of the tiny SD1 txt2img (random `sdflow synth` weights, 64x64, 2
# steps), latency p50/p99, throughput, lost prompts, server RSS.
# WORKERS=N: the server queues on Redis and N `sdflow worker` processes run
# the prompts (needs redis-server; docs/scaling.md).
# usage: [WORKERS=N] bench/server/load.sh [BUILD_DIR=build] [CLIENTS=10] [PROMPTS=200] [MEMORY_BUDGET]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
bin="$src/$build/sdflow"
T=$(mktemp -d /tmp/sdflow-load.XXXXXX)
trap 'rm -rf "$T"' EXIT
"$bin" synth --preset sd1-tiny --models-dir "$T/models" --tokenizer-dir "$T/tok" > /dev/null
printf '{"models_dir": "%s", "tokenizer_dir": "%s", "sd1": "sdflow-random-sd1-tiny.safetensors", "src": "%s"}\n' \
    "$T/models" "$T/tok" "$src" > "$T/models.json"
node "$src/bench/server/load.mjs" "$bin" "$T" "$T/models.json" "${2:-10}" "${3:-200}" "${4:-}"
