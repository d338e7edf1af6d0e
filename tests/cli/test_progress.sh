# Progress output: on a terminal (a pseudo-terminal from script(1)) one line
# per node, redrawn in place with a bar from the node's progress callback;
# plain finished lines without escape codes when stderr is not a terminal;
# nothing on stderr with --quiet (the written files still go to stdout).
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_progress LoadImage ImageScale PreviewImage
command -v script > /dev/null || { echo "SKIP: script(1) is not installed"; exit 77; }
mkdir -p "$T/input"
printf '%s' 'iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAYAAACddGYaAAAAHUlEQVR4nGNgYDjxP4DhBMMCIM3AUAHkVAA5QBoAiIwL9aAmuykAAAAASUVORK5CYII=' |
    base64 -d > "$T/input/in.png"
# 1024x1024 RGB: resized one channel plane at a time, so 3 progress steps
cat > "$T/wf.json" <<'J'
{"1": {"class_type": "LoadImage", "inputs": {"image": "in.png"}},
 "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "bilinear",
       "width": 1024, "height": 1024, "crop": "disabled"}},
 "4": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}}
J
args="run $T/wf.json --no-cache --input-dir $T/input --temp-dir $T/temp"

# on a terminal
script -q -e -c "$SDFLOW_BIN $args" /dev/null < /dev/null > "$T/tty.out" 2>&1 || fail "tty run: $(cat "$T/tty.out")"
grep -aq $'\r\033\[K\[2/3\] ImageScale #2 \[#' "$T/tty.out" || fail "tty: no redrawn progress bar for ImageScale"
grep -aq '\] 3/3 ' "$T/tty.out" || fail "tty: the bar never reached 3/3"
grep -aq $'\[3/3\] PreviewImage #4 [0-9.]*s\r' "$T/tty.out" || fail "tty: no finished line for PreviewImage"
grep -aq 'done: 3 executed, 0 cached' "$T/tty.out" || fail "tty: no summary line"

# not a terminal
"$SDFLOW_BIN" $args > "$T/plain.out" 2> "$T/plain.err" < /dev/null || fail "plain run: $(cat "$T/plain.err")"
# (a slow machine may add a throttled "step k/n" line: only finished lines count)
[ "$(grep -Ec '^\[[1-3]/3\] [A-Za-z]+ #[0-9]+ [0-9.]+s$' "$T/plain.err")" -eq 3 ] ||
    fail "plain: expected 3 finished node lines: $(cat "$T/plain.err")"
grep -q $'\033\|\r' "$T/plain.err" && fail "plain: escape codes or carriage returns when not a terminal"
grep -q '\[#' "$T/plain.err" && fail "plain: a progress bar when not a terminal"
grep -q 'ComfyUI_temp_.*\.png$' "$T/plain.out" || fail "plain: the written file is not on stdout"

# --quiet, also on a terminal
script -q -e -c "$SDFLOW_BIN $args --quiet" /dev/null < /dev/null > "$T/quiet.out" 2>&1 ||
    fail "quiet run: $(cat "$T/quiet.out")"
grep -aq '\[[1-3]/3\]\|done:' "$T/quiet.out" && fail "--quiet printed progress on a terminal: $(cat "$T/quiet.out")"
grep -aq 'ComfyUI_temp_' "$T/quiet.out" || fail "--quiet: the written file is not on stdout"
"$SDFLOW_BIN" $args --quiet > /dev/null 2> "$T/quiet.err" < /dev/null || fail "quiet plain run"
[ -s "$T/quiet.err" ] && fail "--quiet printed on stderr: $(cat "$T/quiet.err")"

sd_test_end "progress ok"
