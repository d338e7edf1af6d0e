#!/usr/bin/env bash
# gpu-pack.sh - packs what scripts/gpu-check.sh needs for a GPU machine that
# gets a copy of the checkout but has none of our Debian libraries
# (docs/cuda.md "One command: scripts/gpu-check.sh"). The build and the
# archive are ../shared/tools/gpu/pack.sh's (build-cuda/, Release, CUDA on);
# this script picks which test binaries go in, trims or adds reference data
# for the part asked, and replaces .gpu/run.sh so that `bash .gpu/run.sh` on
# the GPU machine unpacks and runs scripts/gpu-check.sh with that part's
# steps. A device call carries at most 64 MiB, which holds one part:
#
#   scripts/gpu-pack.sh [sd|flux|sd3|zimage|runs] [-- gpu-check options]
#
#   sd     (default) parity + the SD goldens (tiny SD1 model, golden/)
#   flux, sd3, zimage   that family's goldens, with its reference set
#   runs   no tests: precision, gpu_memory, cold_start, bench (full-size
#          models are synthesized on the GPU machine)
#
# Options after -- are appended to gpu-check.sh's (e.g. -- --skip bench).
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel); cd "$ROOT"
PART=${1:-sd}; [ $# -gt 0 ] && shift
[ "${1:-}" = -- ] && shift
EXTRA_ARGS="$*"
SHARED=${SDFLOW_SHARED:-$ROOT/../shared}; TD=${SDFLOW_TESTDATA:-$SHARED/testdata}
KIT=${SDFLOW_GPU_KIT:-$SHARED/tools/gpu}
[ -f "$KIT/pack.sh" ] || { echo "gpu-pack: no $KIT/pack.sh (SDFLOW_SHARED / SDFLOW_GPU_KIT)" >&2; exit 2; }

# The test binaries that compute on $SDFLOW_TEST_BACKEND, as gpu-check.sh finds them.
backend_tests() {
    for src in $(grep -l 'sd_golden_backend\|SDFLOW_TEST_BACKEND' tests/*/test_*.c); do
        b=$(basename "$src" .c); echo "test_$(basename "$(dirname "$src")")_${b#test_}"
    done
}
family_re='flux|sd3|zimage'
case $PART in
sd)  tests="test_kernels_cuda_parity $(backend_tests | grep -Ev "$family_re")"; args="--only parity,golden"; sets="" ;;
flux|sd3|zimage)
     tests="$(backend_tests | grep -E "_golden_${PART}_")"
     # the VAE golden of a family set (tests/CMakeLists.txt: foreach(set ...) -> golden_vae_<set>)
     grep -Eq "^foreach\(set .*\b$PART\b" tests/CMakeLists.txt && tests="$tests test_models_golden_vae"
     args="--only golden"; sets=$PART ;;
runs) tests=""; args="--only precision,gpu_memory,cold_start,bench"; sets="" ;;
*) echo "gpu-pack: unknown part '$PART' (sd, flux, sd3, zimage, runs)" >&2; exit 2 ;;
esac
re="^($(echo $tests | tr ' ' '|'))\$"
[ -z "$tests" ] && re='^$'
echo "gpu-pack: part $PART: ${tests:-no tests}"
# pack.sh appends /.gpu/ to .git/info/exclude, which is not a directory in a
# git worktree (.git is a file there): run a copy that writes that line to a
# scratch file instead of the main checkout's git folder. In a worktree .gpu/
# then stays untracked (it travels with the working tree; never commit it).
PACK=$KIT/pack.sh
if [ -f .git ]; then
    PACK=$(mktemp)
    sed "s|\.git/info/exclude|$PACK.exclude|g; s|KIT=\$(cd \"\$(dirname \"\$0\")\" \&\& pwd)|KIT=$KIT|" \
        "$KIT/pack.sh" > "$PACK"
fi
GPU_TESTS=$re GPU_EXTRA="" SDFLOW_SHARED=$SHARED SDFLOW_TESTDATA=$TD bash "$PACK"

# Rework the archive: SD data only for the sd part, the family's set for its part.
W=$(mktemp -d); trap 'rm -rf "$W"; [ "$PACK" = "$KIT/pack.sh" ] || rm -f "$PACK" "$PACK.exclude"' EXIT
xz -dc .gpu/payload.tar.xz | tar -C "$W" -xf -
# (without the SD manifest the SD cases of a packed golden_vae skip as data absent)
if [ "$PART" != sd ]; then
    rm -rf "$W/td/testdata/golden" "$W/td/testdata/models" "$W/td/testdata/manifest.json"
fi
for s in $sets; do cp -r "$TD/$s" "$W/td/testdata/$s"; done
# SD3's T5 vocabulary is the Flux set's (sd3/README.md)
if [ "$PART" = sd3 ]; then mkdir -p "$W/td/testdata/flux"; cp -r "$TD/flux/tokenizer" "$W/td/testdata/flux/"; fi
[ "$PART" = runs ] && rm -rf "$W/wf"
echo "$args $EXTRA_ARGS" > "$W/check-args"
tar -C "$W" -cf - . | xz -T0 -6 > .gpu/payload.tar.xz
cp scripts/gpu-run.sh .gpu/run.sh
s=$(du -m .gpu/payload.tar.xz | cut -f1)
echo "gpu-pack: .gpu/payload.tar.xz ${s} MiB, part $PART, gpu-check.sh $args $EXTRA_ARGS"
[ "$s" -le 63 ] || { echo "gpu-pack: ${s} MiB is over what one device call carries (64 MiB)" >&2; exit 1; }
