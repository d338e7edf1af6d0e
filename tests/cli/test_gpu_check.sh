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
sd_test_end "gpu-check refuses cleanly without a GPU"
