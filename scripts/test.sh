#!/usr/bin/env bash
# Builds sdflow and runs the whole test suite: the normal build, then the same
# suite under AddressSanitizer + UBSan, then the fuzz targets for a short fixed
# time. Reference data is read from $SDFLOW_TESTDATA / $SDFLOW_SHARED
# (default ../shared beside the checkout); tests whose data is absent are
# reported as skipped by ctest, never as passed; with SDFLOW_REQUIRE_DATA=1
# (.ci/run sets it: CI always has ../shared) a test whose data is absent
# fails instead (tests/testutil.h, tests/cli/lib.sh).
#
#   scripts/test.sh            the whole suite
#   scripts/test.sh --stress   the same with a CPU hog on every core for the
#                              whole run (the suite must pass on a busy machine:
#                              no test may depend on timing)
#
# Other machines can be imitated on this one: SDFLOW_MAX_CPU_ISA=avx2 (or
# scalar, avx512, avx512_bf16) caps sdflow's own kernels and, unless they are
# set themselves, oneDNN's (ONEDNN_MAX_CPU_ISA) and OpenBLAS's
# (OPENBLAS_CORETYPE) (docs/cli.md, "CPU instruction sets").
set -euo pipefail
cd "$(dirname "$0")/.."
stress=0
for arg in "$@"; do
  case "$arg" in
    --stress) stress=1 ;;
    *) echo "usage: scripts/test.sh [--stress]" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh
bash scripts/setup-test-tools.sh
jobs=$(nproc 2>/dev/null || echo 2)
status=0
skipped_stages=()

if [ "$stress" = 1 ]; then
  # One busy loop per core at the suite's own priority, ended (by their
  # process ids) however this script ends.
  hogs=()
  for _ in $(seq "$jobs"); do
    bash -c 'while :; do :; done' &
    hogs+=($!)
  done
  trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
  echo "== --stress: ${#hogs[@]} CPU hog(s) running (pids ${hogs[*]})"
fi

echo "== build (RelWithDebInfo)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
# Would a fresh machine have every Debian package this build read? (maps each
# header and library to its package and checks setup.sh installs it or pulls
# it in through Depends: a green run here must not hide a missing install step)
shared="${SDFLOW_SHARED:-$(cd .. && pwd)/shared}"
fresh_deps() {
  if [ -x "$shared/tools/fresh-deps" ]; then
    "$shared/tools/fresh-deps" "$1" || status=1
  else
    echo "fresh-deps: SKIPPED ($shared/tools/fresh-deps not found)"
  fi
}
echo "== dependency closure (fresh-deps)"
fresh_deps build
echo "== tests"
ctest --test-dir build --output-on-failure -j"$jobs" || status=1

if [ "${SDFLOW_SKIP_SANITIZE:-0}" = 1 ]; then
  echo "== ASan + UBSan: SKIPPED (SDFLOW_SKIP_SANITIZE=1)"
  skipped_stages+=("ASan + UBSan (SDFLOW_SKIP_SANITIZE=1)")
else
  echo "== build (ASan + UBSan)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSDFLOW_SANITIZE=ON -DSDFLOW_CUDA=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  fresh_deps build-asan
  echo "== tests under ASan + UBSan"
  # Golden model tests are heavy under ASan; they ran above in the normal build.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -E 'golden|bench' || status=1
fi

if [ "${SDFLOW_SKIP_FUZZ:-0}" = 1 ]; then
  echo "== fuzz: SKIPPED (SDFLOW_SKIP_FUZZ=1)"
  skipped_stages+=("fuzz (SDFLOW_SKIP_FUZZ=1)")
elif ! command -v clang >/dev/null; then
  # setup.sh installs clang, so this is a broken machine, not a choice
  echo "== fuzz: SKIPPED (clang is not installed)"
  skipped_stages+=("fuzz (clang is not installed)")
else
  echo "== fuzz (libFuzzer, short fixed time)"
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSDFLOW_FUZZ=ON -DSDFLOW_CUDA=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_all
  # (no fresh-deps here: CMake records whatever LLVM tools the machine
  # happens to have, llvm-ar, ld.lld, in the clang build's cache, and falls
  # back to binutils where they are absent; what the fuzz targets need,
  # clang and its runtimes, is in setup.sh)
  ctest --test-dir build-fuzz --output-on-failure -R '^fuzz\.' || status=1
fi
if [ ${#skipped_stages[@]} -gt 0 ]; then
  echo "== stages NOT run: ${skipped_stages[*]}"
fi
[ "$stress" = 1 ] && echo "== (ran under --stress)"
exit $status
