# Progress of a sampler run, in every form (cli/progress.c, executor events):
#   a pipe: plain "step k/n" lines with a rate and ETA, no escape codes;
#   --progress=json: one JSON object per line, checked event by event;
#   a terminal (tmux): the redrawn bar with rate and ETA, then finished lines;
#   the REPL's run(): the same bar on a terminal, plain lines in a pipe.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_progress_events CheckpointLoaderSimple KSampler VAEDecode SaveImage LoadImage PreviewImage
command -v python3 > /dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
command -v tmux > /dev/null || { echo "SKIP: tmux is not installed"; exit 77; }
mkdir -p "$T/in"
sd_test_tiny_sd1 "$T"
run() { "$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --output-dir "$T/out" "$@"; }

# ---- a pipe: every step line (interval 0), plain text ----
SDFLOW_PROGRESS_INTERVAL=0 run --no-cache > "$T/plain.out" 2> "$T/plain.err" < /dev/null ||
    fail "plain run: $(cat "$T/plain.err")"
for k in 1 2 3; do
    grep -Eq "^\[5/7\] KSampler #3 step $k/3 [0-9.]+(s/it|it/s) ETA [0-9:]+s?$" "$T/plain.err" ||
        fail "pipe: no step $k/3 line with rate and ETA: $(cat "$T/plain.err")"
done
grep -Eq '^\[5/7\] KSampler #3 [0-9.]+s$' "$T/plain.err" || fail "pipe: no finished line for KSampler"
grep -q 'done: 7 executed, 0 cached' "$T/plain.err" || fail "pipe: no summary"
grep -q $'\033\|\r' "$T/plain.err" && fail "pipe: escape codes or carriage returns"
grep -q '\.png$' "$T/plain.out" || fail "pipe: the written file is not on stdout"
# the default interval throttles step lines but never the finished lines
run --no-cache > /dev/null 2> "$T/plain1.err" < /dev/null || fail "plain run, default interval"
[ "$(grep -Ec '^\[[1-7]/7\] [A-Za-z]+ #[0-9]+ [0-9.]+s$' "$T/plain1.err")" -eq 7 ] ||
    fail "pipe: not 7 finished lines: $(cat "$T/plain1.err")"

# the mode can be forced either way: a bar into a pipe, nothing with none
run --no-cache --progress=bar > /dev/null 2> "$T/bar.err" < /dev/null || fail "--progress=bar run"
grep -aq $'\r\033\[K\[5/7\] KSampler #3 \[' "$T/bar.err" || fail "--progress=bar: no bar in a pipe"
run --no-cache --progress=none > /dev/null 2> "$T/none.err" < /dev/null || fail "--progress=none run"
grep -q '\[[1-7]/7\]\|done:' "$T/none.err" && fail "--progress=none printed progress: $(cat "$T/none.err")"
run --quiet --progress=json > /dev/null 2> "$T/err" && fail "--quiet with --progress=json accepted"
grep -q 'exclude each other' "$T/err" || fail "--quiet --progress=json: $(cat "$T/err")"

# ---- --progress=json ----
check_json() { # FILE EXPECTED-STATUS: the event grammar of core/executor.h
    python3 - "$1" "$2" << 'PY'
import json, os, sys
path, want = sys.argv[1], sys.argv[2]
ev = [json.loads(l) for l in open(path) if l.strip()]  # every line is one JSON object
errs = []
def need(c, m):
    if not c: errs.append(m)
need(ev and ev[-1]["event"] == "done", "last event is not done")
done = ev[-1]
need(done.get("status") == want, "status %r, want %r" % (done.get("status"), want))
started = ev[0]["event"] == "start"
if want != "invalid":
    need(started, "first event is not start")
count = ev[0]["count"] if started else 0
open_node, seen, executed, cached = None, [], 0, 0
for e in ev[1:-1]:
    k = e["event"]
    need(k in ("node_start", "step", "preview", "node_done", "cached", "error"), "unknown event " + k)
    need(e.get("count") == count and isinstance(e.get("node"), str) and e.get("class_type"), "fields: %r" % e)
    if k == "node_start":
        need(open_node is None, "node_start inside another node")
        open_node = e["node"]; steps = []
        need(e["index"] == len(seen) + 1, "index %r after %d nodes" % (e["index"], len(seen)))
    elif k in ("step", "preview"):
        need(open_node == e["node"], "step outside its node")
        if k == "step":
            need(1 <= e["step"] <= e["steps"], "step out of range: %r" % e)
            need(not steps or e["step"] == steps[-1] + 1, "steps not consecutive")
            steps.append(e["step"])
            if e["class_type"] == "KSampler":
                need(e["steps"] == 3 and "seconds_per_step" in e and "eta_seconds" in e, "KSampler step: %r" % e)
    elif k in ("node_done", "error"):
        need(open_node == e["node"], k + " without node_start")
        open_node = None; seen.append((e["node"], e["class_type"], k, steps))
        executed += k == "node_done" and not e.get("delivered")
        cached += k == "node_done" and bool(e.get("delivered"))
        for f in e.get("files", []):
            need(os.path.isfile(f), "listed file missing: " + f)
        if k == "error":
            need(e["error"]["type"] and e["error"]["message"], "error without type/message")
    elif k == "cached":
        need(open_node is None, "cached inside a node")
        need(e["index"] == len(seen) + 1 and e["from"] in ("cache", "memory"), "cached: %r" % e)
        seen.append((e["node"], e["class_type"], k, [])); cached += 1
need(open_node is None, "a node never finished")
need(len(seen) == count or (want == "error" and len(seen) < count), "%d nodes finished, %d announced" % (len(seen), count))
need(done["executed"] == executed and done["cached"] == cached, "done counts: %r" % done)
for node, cls, k, steps in seen:
    print(node, cls, k, ",".join(map(str, steps)))
if errs:
    print("\n".join(errs), file=sys.stderr); sys.exit(1)
PY
}
run --no-cache --progress=json > "$T/ev.json" 2> "$T/ev.err" || fail "json run: $(cat "$T/ev.err")"
if check_json "$T/ev.json" success > "$T/ev.seen" 2> "$T/ev.check"; then
    grep -q '^3 KSampler node_done 1,2,3$' "$T/ev.seen" || fail "json: KSampler steps: $(cat "$T/ev.seen")"
    [ "$(grep -c 'node_done' "$T/ev.seen")" -eq 7 ] || fail "json: not 7 executed nodes: $(cat "$T/ev.seen")"
    grep -q '^9 SaveImage node_done' "$T/ev.seen" || fail "json: SaveImage not last done"
else
    fail "json events: $(cat "$T/ev.check")"
fi
grep -q '"files":\["[^"]*\.png"\]' "$T/ev.json" || fail "json: SaveImage's file is not in its event"
grep -q '\[5/7\]' "$T/ev.err" && fail "json: human progress on stderr too"
# a second run from the cache: only cached events
run --cache "$T/c.db" > /dev/null 2>&1
run --cache "$T/c.db" --progress=json > "$T/ev2.json" 2> /dev/null || fail "cached json run"
check_json "$T/ev2.json" success > "$T/ev2.seen" 2> "$T/ev2.check" || fail "cached json: $(cat "$T/ev2.check")"
grep -q 'node_done\|node_start' "$T/ev2.json" && fail "cached json: a node executed"
grep -q ' cached $' "$T/ev2.seen" || fail "cached json: no cached event: $(cat "$T/ev2.json")"
# ... into another folder: SaveImage writes its files again (delivered), counted as cached
run --cache "$T/c.db" --output-dir "$T/out2" --progress=json > "$T/ev5.json" 2> /dev/null || fail "delivered json run"
check_json "$T/ev5.json" success > /dev/null 2> "$T/ev5.check" || fail "delivered json: $(cat "$T/ev5.check")"
grep -q '"event":"node_done","node":"9".*"delivered":true,"from":"cache","files":\["[^"]*/out2/' "$T/ev5.json" ||
    fail "delivered json: no delivered SaveImage: $(cat "$T/ev5.json")"
# a node that fails: error event naming it, then done with status error
printf 'not a png' > "$T/in/bad.png"
printf '{"1": {"class_type": "LoadImage", "inputs": {"image": "bad.png"}},
 "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}' > "$T/bad.json"
"$SDFLOW_BIN" run "$T/bad.json" --no-cache --input-dir "$T/in" --temp-dir "$T/tmp" --progress=json > "$T/ev3.json" 2> /dev/null &&
    fail "a failing run exited 0"
check_json "$T/ev3.json" error > "$T/ev3.seen" 2> "$T/ev3.check" || fail "error json: $(cat "$T/ev3.check")"
grep -q '^1 LoadImage error' "$T/ev3.seen" || fail "error json: no error event for node 1: $(cat "$T/ev3.json")"
# validation failure: just done, status invalid
run --no-cache --progress=json --set 3.steps=0 > "$T/ev4.json" 2> /dev/null && fail "an invalid run exited 0"
check_json "$T/ev4.json" invalid > /dev/null 2> "$T/ev4.check" || fail "invalid json: $(cat "$T/ev4.check")"

# ---- a terminal (tmux): raw bytes of the pane ----
SOCK="$T/tmux.sock"
tm() { tmux -S "$SOCK" "$@"; }
trap 'tm kill-server > /dev/null 2>&1' EXIT
args=$(printf "'%s' " "${SD_TINY_ARGS[@]}")
tm new-session -d -s bar -x 200 -y 50 "read go; '$SDFLOW_BIN' run $args --no-cache --output-dir '$T/out'; echo RUN-EXITED \$?; sleep 30"
tm pipe-pane -t bar -o "cat > '$T/tty.raw'"
tm send-keys -t bar Enter
for i in $(seq 1 300); do grep -q 'RUN-EXITED' "$T/tty.raw" 2> /dev/null && break; sleep 0.1; done
grep -aq 'RUN-EXITED 0' "$T/tty.raw" || fail "tty run: $(tm capture-pane -p -t bar)"
grep -aEq $'\r\033\\[K\\[5/7\\] KSampler #3 \\[########[.]+\\] 1/3 [0-9.]+(s/it|it/s) ETA [0-9:]+s?' "$T/tty.raw" ||
    fail "tty: no redrawn bar with rate and ETA for KSampler"
grep -aq '\] 3/3 ' "$T/tty.raw" || fail "tty: the bar never reached 3/3"
pane=$(tm capture-pane -p -t bar)
printf '%s\n' "$pane" | grep -Eq '^\[5/7\] KSampler #3 [0-9.]+s$' || fail "tty: the bar was not replaced by the finished line: $pane"
printf '%s\n' "$pane" | grep -q '^done: 7 executed' || fail "tty: no summary"

# ---- the REPL's run(): bar on a terminal ----
tm new-session -d -s repl -x 200 -y 50 \
    "cd '$T' && HOME='$T' '$SDFLOW_BIN' repl $args --no-cache --no-history --output-dir out; sleep 30"
for i in $(seq 1 100); do tm capture-pane -p -t repl | grep -q '^sdflow>' && break; sleep 0.1; done
tm pipe-pane -t repl -o "cat > '$T/repl.raw'"
tm send-keys -t repl -l 'run()'
tm send-keys -t repl Enter
for i in $(seq 1 300); do tm capture-pane -p -t repl | grep -q '^done: ' && break; sleep 0.1; done
tm capture-pane -p -t repl | grep -q '^done: 7 executed' || fail "repl: run() did not finish: $(tm capture-pane -p -t repl)"
grep -aEq $'\r\033\\[K\\[5/7\\] KSampler #3 \\[[#.]+\\] [1-3]/3 ' "$T/repl.raw" || fail "repl: no progress bar in run()"
tm capture-pane -p -t repl | grep -Eq '^\[5/7\] KSampler #3 [0-9.]+s$' || fail "repl: no finished KSampler line"
tm send-keys -t repl -l 'quit()'
tm send-keys -t repl Enter

# ---- the REPL in a pipe: plain lines ----
printf 'run()\n' | (cd "$T" && SDFLOW_PROGRESS_INTERVAL=0 "$SDFLOW_BIN" repl "${SD_TINY_ARGS[@]}" --no-cache --no-history \
    --output-dir out > "$T/repl.out" 2>&1) || fail "piped repl: $(cat "$T/repl.out")"
grep -Eq '^\[5/7\] KSampler #3 step 3/3 ' "$T/repl.out" || fail "piped repl: no step lines: $(cat "$T/repl.out")"
grep -q '^done: 7 executed' "$T/repl.out" || fail "piped repl: no summary"

sd_test_end "progress events ok"
