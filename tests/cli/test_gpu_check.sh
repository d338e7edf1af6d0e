# scripts/gpu-check.sh where there is no GPU to check: it refuses with exit
# 77, saying sdflow found no usable GPU and why, runs none of its steps, and
# leaves a summary saying so. CUDA_VISIBLE_DEVICES=-1 hides every device, so
# the refusal is checked on machines with a GPU too. Usage errors (an
# unknown step, no binaries) exit 2 naming the problem.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_gpu_check EmptyImage PreviewImage
CHECK="$SDFLOW_SOURCE_DIR/scripts/gpu-check.sh"
BUILD=$(dirname "$SDFLOW_BIN")

CUDA_VISIBLE_DEVICES=-1 bash "$CHECK" --build "$BUILD" --work "$T/w" > "$T/out" 2> "$T/err"
rc=$?
[ $rc = 77 ] || fail "no GPU: exit $rc, expected 77: $(cat "$T/out" "$T/err")"
grep -q "refused: no usable GPU" "$T/err" || fail "no GPU: the refusal does not say so: $(cat "$T/err")"
# the reason is sdflow's own (no device, or no CUDA in this build)
grep -qi "no usable CUDA device\|not available in this build" "$T/err" ||
    fail "no GPU: the refusal does not give sdflow's reason: $(cat "$T/err")"
grep -q '| gpu | .* | SKIP | .*no usable GPU' "$T/w/out/summary.md" ||
    fail "no GPU: the summary does not record the refusal: $(cat "$T/w/out/summary.md")"
# nothing beyond the probe ran
ls "$T/w/out/logs" | grep -qv '^probe.log$' && fail "no GPU: steps ran anyway: $(ls "$T/w/out/logs")"
[ -d "$T/w/models" ] && fail "no GPU: models were synthesized anyway"

bash "$CHECK" --build "$BUILD" --work "$T/w2" --only parity,nosuchstep > /dev/null 2> "$T/err2"
[ $? = 2 ] && grep -q "no step 'nosuchstep'" "$T/err2" || fail "unknown step not refused: $(cat "$T/err2")"
bash "$CHECK" --build "$T/nobuild" --work "$T/w3" > /dev/null 2> "$T/err3"
[ $? = 2 ] && grep -q "no sdflow binary at $T/nobuild/sdflow" "$T/err3" || fail "missing binaries not named: $(cat "$T/err3")"
[ "$(bash "$CHECK" --list)" = "parity golden precision gpu_memory cold_start bench" ] ||
    fail "--list: $(bash "$CHECK" --list)"
# The machinery of the model steps (synthesis, runs with timestamped
# progress events, the timing rows, the PNG comparison, the summary) on the
# CPU: --device cpu --tiny rehearses the cold-start step in seconds.
bash "$CHECK" --build "$BUILD" --work "$T/r" --device cpu --tiny --only cold_start > "$T/r.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "rehearsal: exit $rc: $(tail -20 "$T/r.out")"
for what in "process 1: txt2img_sd15" "process 2: txt2img_sd15" "two processes: byte-identical PNGs"; do
    grep -q "| cold_start | $what.* | PASS |" "$T/r/out/summary.md" || fail "rehearsal: no PASS row '$what'"
done
grep -q '| cold_start | process 2: loader done -> first step | MEAS | 0 | [0-9.]* s; target <= 1.5 s: \(met\|missed\) |' \
    "$T/r/out/summary.md" || fail "rehearsal: no timing row: $(cat "$T/r/out/summary.md")"
grep -q '^1 passed\|^[0-9]* passed, 0 failed' "$T/r/out/summary.md" || fail "rehearsal: the count line: $(tail -3 "$T/r/out/summary.md")"
sd_test_end "gpu-check refuses cleanly without a GPU; its cold-start step rehearses on the CPU"
