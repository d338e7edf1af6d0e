#!/usr/bin/env bash
# Builds sdflow and runs the whole test suite: the normal build, then the same
# suite under AddressSanitizer + UBSan, then the fuzz targets for a short fixed
# time. Reference data is read from $SDFLOW_TESTDATA / $SDFLOW_SHARED
# (default ../shared beside the checkout); tests whose data is absent are
# reported as skipped by ctest, never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup-test-tools.sh
jobs=$(nproc 2>/dev/null || echo 2)
status=0

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

if [ "${SDFLOW_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== build (ASan + UBSan)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSDFLOW_SANITIZE=ON -DSDFLOW_CUDA=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  fresh_deps build-asan
  echo "== tests under ASan + UBSan"
  # Golden model tests are heavy under ASan; they ran above in the normal build.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -E 'golden|bench' || status=1
fi

if [ "${SDFLOW_SKIP_FUZZ:-0}" != 1 ] && command -v clang >/dev/null; then
  echo "== fuzz (libFuzzer, short fixed time)"
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSDFLOW_FUZZ=ON -DSDFLOW_CUDA=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fuzz_all
  # (no fresh-deps here: CMake records whatever LLVM tools the machine
  # happens to have, llvm-ar, ld.lld, in the clang build's cache, and falls
  # back to binutils where they are absent; what the fuzz targets need,
  # clang and its runtimes, is in setup.sh)
  ctest --test-dir build-fuzz --output-on-failure -R '^fuzz\.' || status=1
fi
exit $status
