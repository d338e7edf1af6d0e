# Ctrl-C: one SIGINT stops the run inside the long node at its next progress
# check (not only between nodes), exits 130, writes a report that says
# "cancelled", and leaves the cache with only complete results (a rerun reuses
# the finished LoadImage and computes the rest). A second SIGINT exits at once
# (no report, no final line), and the cache is still usable afterwards.
#
# The second SIGINT is sent once sdflow has acknowledged the first (its
# "interrupting after the current step" line), while the run is inside a
# step that cannot stop halfway: two signals sent a fixed time apart can
# merge into one in the kernel while the first is still pending, and the
# run can finish stopping before a late second one arrives (issue 14: both
# happened on a loaded machine).
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_interrupt LoadImage ImageScale ImageInvert Canny SaveImage

mkdir -p "$T/input" "$T/output"
printf '%s' 'iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAYAAACddGYaAAAAHUlEQVR4nGNgYDjxP4DhBMMCIM3AUAHkVAA5QBoAiIwL9aAmuykAAAAASUVORK5CYII=' |
    base64 -d > "$T/input/in.png"
flat() { tr -d ' \t\n' < "$1"; }
status() {
    local s
    s=$(flat "$1" | grep -o "\"$2\":{\"class_type\":\"[^\"]*\",\"status\":\"[a-z]*\"" | sed 's/.*"status":"//; s/"$//')
    echo "${s:-absent}"
}

# A 4096x4096 bicubic resize takes seconds; the rest is instant. An ASan
# build is ~20 times slower: it gets a quarter of the pixels (still seconds
# per step), so that the run, its complete rerun and the Canny run fit in
# the test's time on a loaded machine.
BIG=4096 CANNY=3000
"$SDFLOW_BIN" --version 2>&1 | grep -q 'sanitize=ON' && BIG=2048 CANNY=1500
cat > "$T/wf.json" <<J
{"1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "bicubic",
       "width": $BIG, "height": $BIG, "crop": "disabled"}},
 "3": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
 "5": {"class_type": "ImageScale", "inputs": {"image": ["3", 0], "upscale_method": "area",
       "width": 64, "height": 64, "crop": "disabled"}},
 "4": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": "int"}}}
J

# Canny on 3000x3000 is one step of seconds that no Ctrl-C can cut short.
cat > "$T/canny.json" <<J
{"1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "nearest-exact",
       "width": $CANNY, "height": $CANNY, "crop": "disabled"}},
 "3": {"class_type": "Canny", "inputs": {"image": ["2", 0], "low_threshold": 0.4, "high_threshold": 0.8}},
 "5": {"class_type": "ImageScale", "inputs": {"image": ["3", 0], "upscale_method": "area",
       "width": 64, "height": 64, "crop": "disabled"}},
 "4": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": "int"}}}
J

# start NAME [args]: runs $WF (default wf.json) in the background, pid in $pid
start() {
    local name=$1
    shift
    SDFLOW_PROGRESS_INTERVAL=0 "$SDFLOW_BIN" run "$T/${WF:-wf.json}" --cache "$T/cache.db" --input-dir "$T/input" --output-dir "$T/output" \
        --report "$T/$name.json" "$@" > /dev/null 2> "$T/$name.err" < /dev/null &
    pid=$!
}
# Waits until the big ImageScale has reported its first step of three: it
# is running, with steps left for the Ctrl-C to cut short (no deadline of
# its own: the run ends or ctest's timeout does).
wait_for_scale() {
    while :; do
        grep -q "ImageScale #2 step 1/" "$T/$1.err" 2> /dev/null && return 0
        kill -0 "$pid" 2> /dev/null || return 1
        sleep 0.02
    done
    return 1
}

# ---- one SIGINT: cancelled inside the node, clean exit -------------------------------
start first
wait_for_scale first || fail "first: ImageScale never reported a step: $(cat "$T/first.err")"
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] || fail "first: exit code $rc, expected 130: $(cat "$T/first.err")"
[ "$(flat "$T/first.json" | grep -o '"status":"cancelled"')" != "" ] || fail "first: report does not say cancelled"
[ "$(status "$T/first.json" 1)" = "executed" ] || fail "first: LoadImage is $(status "$T/first.json" 1)"
# Stopped inside ImageScale: it never finished, and nothing after it ran.
[ "$(status "$T/first.json" 2)" != "executed" ] || fail "first: ImageScale ran to the end (interrupt only between nodes?)"
[ "$(status "$T/first.json" 3)" != "executed" ] || fail "first: ImageInvert ran after the interrupt"
grep -q "interrupted" "$T/first.err" || fail "first: no 'interrupted' message"
ls "$T/output"/int_*.png > /dev/null 2>&1 && fail "first: an image was saved"
"$SDFLOW_BIN" cache list --cache "$T/cache.db" > "$T/list.txt" 2>&1 || fail "cache list after interrupt: $(cat "$T/list.txt")"
grep -q "LoadImage" "$T/list.txt" || fail "the finished LoadImage was not cached"
grep -q "ImageScale" "$T/list.txt" && fail "the interrupted ImageScale left a cache entry"

# ---- the rerun reuses only complete results -----------------------------------------------
"$SDFLOW_BIN" run "$T/wf.json" --cache "$T/cache.db" --input-dir "$T/input" --output-dir "$T/output" \
    --report "$T/rerun.json" --quiet > /dev/null 2> "$T/rerun.err" < /dev/null || fail "rerun: $(cat "$T/rerun.err")"
[ "$(status "$T/rerun.json" 1)" = "cached" ] || fail "rerun: LoadImage is $(status "$T/rerun.json" 1)"
for id in 2 3 5 4; do
    [ "$(status "$T/rerun.json" $id)" = "executed" ] || fail "rerun: node $id is $(status "$T/rerun.json" $id)"
done
ls "$T/output"/int_*.png > /dev/null 2>&1 || fail "rerun: no image saved"

# ---- a second SIGINT leaves at once ------------------------------------------------------
# waits until file $1 has a line matching $2 (while the run lives)
wait_line() {
    while :; do
        grep -q "$2" "$1" 2> /dev/null && return 0
        kill -0 "$pid" 2> /dev/null || return 1
        sleep 0.02
    done
    return 1
}
WF=canny.json start second
# the finished line of the resize: Canny has just started
wait_line "$T/second.err" 'ImageScale #2 [0-9.]*s$' || fail "second: the resize never finished: $(cat "$T/second.err")"
kill -INT "$pid"
wait_line "$T/second.err" "interrupting after the current step" ||
    fail "second: the first Ctrl-C was not acknowledged: $(cat "$T/second.err")"
kill -INT "$pid" 2> /dev/null
wait "$pid"
rc=$?
[ "$rc" -eq 130 ] || fail "second: exit code $rc, expected 130: $(cat "$T/second.err")"
# _exit from the signal handler: no report, no "stopped:" summary
[ -e "$T/second.json" ] && fail "second: the run went on to write its report after the second Ctrl-C"
grep -q "^stopped:" "$T/second.err" && fail "second: the run finished normally after the second Ctrl-C"
"$SDFLOW_BIN" run "$T/wf.json" --cache "$T/cache.db" --input-dir "$T/input" --output-dir "$T/output" \
    --report "$T/after.json" --quiet > /dev/null 2> "$T/after.err" < /dev/null || fail "after a hard exit: $(cat "$T/after.err")"
[ "$(status "$T/after.json" 4)" = "cached" ] || fail "after a hard exit: the cache lost the finished run"

sd_test_end "interrupt ok"
