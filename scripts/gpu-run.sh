#!/usr/bin/env bash
# gpu-run.sh - copied to .gpu/run.sh by scripts/gpu-pack.sh; on the GPU
# machine, from the checkout root: `bash .gpu/run.sh [gpu-check options]`.
# Unpacks the payload into /tmp/w, puts the machine's CUDA libraries and the
# packed ones on the library path, and runs scripts/gpu-check.sh with the
# part's steps (/tmp/w/check-args) and any options given. Writes
# $OUT/summary.md and $OUT/logs.tgz (OUT default /tmp/gpu-out). The models
# gpu-check synthesizes stay in /tmp/gpu-check for the next call on a warm
# machine.
set -u
OUT=${OUT:-/tmp/gpu-out}; W=/tmp/w
mkdir -p "$OUT"; rm -rf "$W"; mkdir -p "$W"
xz -T0 -dc .gpu/payload.tar.xz | tar -C "$W" -xf - || { echo "unpack failed" | tee "$OUT/summary.md"; exit 1; }
CL=""
for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
    p=$(find /usr/local/cuda* /usr/lib/x86_64-linux-gnu /opt -name "$n" 2>/dev/null | head -1)
    [ -n "$p" ] && CL="$CL:$(dirname "$p")"
done
export LD_LIBRARY_PATH="$W/lib$CL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export SDFLOW_TESTDATA=$W/td/testdata SDFLOW_SHARED=$W/td
ldd "$W/bin/sdflow" | grep 'not found' && echo "(libraries missing: the steps will fail)"
# shellcheck disable=SC2046
bash scripts/gpu-check.sh --bin "$W/bin" --work /tmp/gpu-check --out "$OUT" $(cat "$W/check-args") "$@"
rc=$?
tar -C "$OUT" -czf "$OUT/logs.tgz" logs 2>/dev/null && rm -rf "$OUT/logs"
exit $rc
