#!/usr/bin/env bash
# ComfyUI's three script_examples clients (tests/server/comfy_script_examples,
# unmodified: their SHA-256 is checked first) against `sdflow serve`. They
# talk to 127.0.0.1:8188 and load "v1-5-pruned-emaonly.safetensors", so the
# server gets that port in a network namespace of its own (unshare -rn: no
# other process's 8188 is touched) and the name is a link to the tiny random
# SD1 checkpoint. Each script runs through runpy, which hands back its
# globals: the images it received are checked (PNG, 512x512), and the
# server's history must list the three prompts as successes. Every wait is
# for a condition (the server listening, the prompt's history entry) for as
# long as the server lives: on a loaded machine a prompt may take minutes,
# and only ctest's TIMEOUT bounds the test.
set -u
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
sd_test_begin cli_server_script_examples
EX="$SDFLOW_SOURCE_DIR/tests/server/comfy_script_examples"
(cd "$EX" && sha256sum --quiet -c SHA256SUMS) || { fail "the script_examples copies differ from ComfyUI's"; sd_test_end x; }
/usr/bin/python3 -c 'import websocket' 2> /dev/null ||
    { echo "SKIP: python3-websocket is not installed (bash scripts/setup-test-tools.sh installs it)"; exit 77; }
unshare -rn true 2> /dev/null ||
    { echo "SKIP: unshare -rn (a private network namespace for port 8188) is not available here"; exit 77; }
"$SDFLOW_BIN" serve --help > /dev/null 2>&1 || { echo "FAIL: this sdflow has no server"; exit 1; }
"$SDFLOW_BIN" synth --preset sd1-tiny --models-dir "$T/models" --tokenizer-dir "$T/tok" > /dev/null ||
    { echo "FAIL: sdflow synth"; exit 1; }
ln -s sdflow-random-sd1-tiny.safetensors "$T/models/checkpoints/v1-5-pruned-emaonly.safetensors"

cat > "$T/run.sh" << EOF
set -u
ip link set lo up
"$SDFLOW_BIN" serve --port 8188 --models-dir "$T/models" --tokenizer-dir "$T/tok" --input-dir "$T/input" \\
    --output-dir "$T/out" --temp-dir "$T/temp" --user-directory "$T/user" --no-cache --no-previews > "$T/server.log" 2>&1 &
pid=\$!
until grep -q 'listening on' "$T/server.log"; do
    kill -0 \$pid 2> /dev/null || { echo "FAIL: the server exited before listening"; exit 1; }
    sleep 0.1
done
cd "$T"
/usr/bin/python3 - "$EX" \$pid << 'PY'
import json, runpy, sys, time, urllib.request
ex, server_pid = sys.argv[1], int(sys.argv[2])
def server_alive():
    try:
        with open("/proc/%d/stat" % server_pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
def wait_for(cond, what):
    while not cond():
        if not server_alive():
            print("FAIL: the server exited while waiting for " + what)
            sys.exit(1)
        time.sleep(0.2)
def history():
    with urllib.request.urlopen("http://127.0.0.1:8188/history") as r:
        return json.loads(r.read())
def png_size(b):
    return (int.from_bytes(b[16:20], "big"), int.from_bytes(b[20:24], "big")) if b[:8] == b"\x89PNG\r\n\x1a\n" else None
ok = True
def check(cond, what):
    global ok
    print(("ok: " if cond else "FAIL: ") + what)
    ok = ok and cond

runpy.run_path(ex + "/basic_api_example.py", run_name="__main__")
# the script only queues its prompt: its history entry, with an outcome, says it ended
wait_for(lambda: any((e.get("status") or {}).get("status_str") in ("success", "error") for e in history().values()),
         "basic_api_example.py's prompt to end")
h = history()
check(len(h) == 1 and all(e["status"]["status_str"] == "success" for e in h.values()),
      "basic_api_example.py: its prompt ran (%s)" % [e["status"]["status_str"] for e in h.values()])

g = runpy.run_path(ex + "/websockets_api_example.py", run_name="__main__")
imgs = g.get("images", {})
sizes = [png_size(b) for node in imgs.values() for b in node]
check(list(imgs) == ["9"] and sizes == [(512, 512)],
      "websockets_api_example.py: SaveImage's picture through /history and /view (%s %s)" % (list(imgs), sizes))

g = runpy.run_path(ex + "/websockets_api_example_ws_images.py", run_name="__main__")
imgs = g.get("images", {})
sizes = [png_size(b) for node in imgs.values() for b in node]
check(list(imgs) == ["save_image_websocket_node"] and sizes == [(512, 512)],
      "websockets_api_example_ws_images.py: the picture as a binary WebSocket frame (%s %s)" % (list(imgs), sizes))
h = history()
check(len(h) == 3 and all(e["status"]["status_str"] == "success" for e in h.values()),
      "the history lists three successful prompts (%d)" % len(h))
sys.exit(0 if ok else 1)
PY
rc=\$?
kill \$pid
wait \$pid
exit \$rc
EOF
unshare -rn bash "$T/run.sh" || { fail "the script_examples run (server log: $(tail -5 "$T/server.log"))"; }
sd_test_end "ComfyUI's script_examples run unmodified"
