#!/usr/bin/env bash
# `sdflow worker` and `serve --redis`, the parts tests/server/redis_test.mjs
# (cli.server_redis) does not cover:
# - --shared-cache: node outputs small enough (conditioning, latents) go to
#   Redis as a second cache tier, so a worker with an empty cache of its own
#   reuses what another worker computed, and its image is byte for byte what
#   `sdflow run` makes; a value found in Redis is copied into the worker's
#   own cache; --shared-cache 0 and --no-cache share nothing.
# - Redis going away: the server answers 503 with an error body (and still
#   serves its page), the worker waits; once Redis is back (empty: no
#   persistence) both reconnect and a new prompt runs.
# Starts its own redis-server on a free port (Debian redis-server,
# installed by scripts/setup-test-tools.sh).
set -u
. "$SDFLOW_SOURCE_DIR/tests/cli/lib.sh"
sd_test_begin cli_worker_redis CLIPTextEncode KSampler SaveImage
command -v redis-server > /dev/null && command -v redis-cli > /dev/null ||
    { echo "SKIP: redis-server is not installed (bash scripts/setup-test-tools.sh installs it)"; exit 77; }
"$SDFLOW_BIN" worker --help > /dev/null 2>&1 || { echo "FAIL: this sdflow has no worker (libhiredis-dev missing at build time)"; exit 1; }
sd_test_tiny_sd1 "$T"
M=(--models-dir "$T/models" --tokenizer-dir "$T/tok")

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(free_port)
# a password, given to the server in its URL and to the workers in the environment
PW="pw-$RANDOM-$RANDOM"
export REDISCLI_AUTH=$PW
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done; wait 2> /dev/null; }
trap cleanup EXIT
start_redis() {
    redis-server --port "$RP" --bind 127.0.0.1 --requirepass "$PW" --save '' --appendonly no --dir "$T" >> "$T/redis.log" 2>&1 &
    pids+=($!)
    for i in $(seq 50); do redis-cli -p "$RP" ping > /dev/null 2>&1 && break; sleep 0.1; done
}
start_redis
URL="redis://127.0.0.1:$RP"

"$SDFLOW_BIN" serve --port 0 --redis "redis://:$PW@127.0.0.1:$RP" --redis-prefix t "${M[@]}" --output-dir "$T/srv_out" --no-cache > "$T/serve.log" 2>&1 &
pids+=($!)
for i in $(seq 100); do PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$T/serve.log" | grep -o '[0-9]*$') && break; sleep 0.1; done
[ -n "${PORT:-}" ] || { echo "FAIL: the server did not start: $(cat "$T/serve.log")"; exit 1; }

start_worker() { # NAME [options]
    local n=$1
    shift
    SDFLOW_REDIS_PASSWORD=$PW "$SDFLOW_BIN" worker --redis "$URL" --redis-prefix t --name "$n" "${M[@]}" --output-dir "$T/$n/out" \
        --input-dir "$T/$n/in" --temp-dir "$T/$n/tmp" --no-previews "$@" > "$T/$n.log" 2>&1 &
    WPID=$!
    pids+=($WPID)
}
stop_worker() { kill "$1"; wait "$1" 2> /dev/null; }

# queue SEED: queues tiny.json with that seed, waits for its history entry,
# prints "status cached-node-ids filename" (the client's view, over HTTP)
queue() {
    python3 - "$PORT" "$T/tiny.json" "$1" << 'PY'
import json, sys, time, urllib.request
port, wf, seed = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
wf["3"]["inputs"]["seed"] = seed
base = f"http://127.0.0.1:{port}"
req = urllib.request.Request(base + "/prompt", data=json.dumps({"prompt": wf}).encode(), method="POST")
pid = json.load(urllib.request.urlopen(req))["prompt_id"]
for _ in range(600):
    h = json.load(urllib.request.urlopen(f"{base}/history/{pid}"))
    if pid in h and h[pid]["status"]["completed"] or pid in h and h[pid]["status"]["status_str"] == "error":
        e = h[pid]
        cached = next((m[1]["nodes"] for m in e["status"]["messages"] if m[0] == "execution_cached"), [])
        imgs = [i for o in e["outputs"].values() for i in o.get("images", [])]
        print(e["status"]["status_str"], ",".join(sorted(cached)) or "-", imgs[0]["filename"] if imgs else "-")
        sys.exit(0)
    time.sleep(0.1)
print("timeout - -")
PY
}
# submit SEED STEPS: queues without waiting, prints the prompt id
submit() {
    python3 - "$PORT" "$T/tiny.json" "$1" "$2" << 'PY'
import json, sys, urllib.request
port, wf = sys.argv[1], json.load(open(sys.argv[2]))
wf["3"]["inputs"]["seed"], wf["3"]["inputs"]["steps"] = int(sys.argv[3]), int(sys.argv[4])
req = urllib.request.Request(f"http://127.0.0.1:{port}/prompt", data=json.dumps({"prompt": wf}).encode(), method="POST")
print(json.load(urllib.request.urlopen(req))["prompt_id"])
PY
}
# await_error ID: waits for the entry, prints "status_str exception_message"
await_error() {
    python3 - "$PORT" "$1" << 'PY'
import json, sys, time, urllib.request
port, pid = sys.argv[1], sys.argv[2]
for _ in range(300):
    h = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/history/{pid}"))
    if pid in h:
        m = [x[1] for x in h[pid]["status"]["messages"] if x[0] == "execution_error"]
        print(h[pid]["status"]["status_str"], m[0]["exception_message"] if m else "-")
        sys.exit(0)
    time.sleep(0.1)
print("timeout -")
PY
}
view() { python3 -c "import sys,urllib.request; sys.stdout.buffer.write(urllib.request.urlopen('http://127.0.0.1:$PORT/view?filename=$1&type=output').read())"; }

# the workers /system_stats lists (each announces itself every 2 s; a clean stop removes it)
workers() {
    python3 -c "import json,urllib.request; d=json.load(urllib.request.urlopen('http://127.0.0.1:$PORT/system_stats')); print(','.join(sorted(w['name'] for w in d['workers'])) or '-', ','.join(sorted(x['type'] for x in d['devices'])) or '-')"
}
wait_workers() { for i in $(seq 60); do [ "$(workers)" = "$1" ] && return 0; sleep 0.1; done; return 1; }

# a prefix too long for the keys is refused by both, naming the option
long=$(printf 'p%.0s' $(seq 65))
for cmd in "serve --port 0" worker; do
    timeout 20 "$SDFLOW_BIN" $cmd --redis "$URL" --redis-prefix "$long" "${M[@]}" > "$T/longprefix.log" 2>&1 &&
        fail "$cmd took a 65-byte --redis-prefix"
    grep -q -- "--redis-prefix must be 1 to 64 bytes" "$T/longprefix.log" || fail "$cmd: $(cat "$T/longprefix.log")"
done

# the password is never shown: not in /system_stats's argv, not in the log
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/system_stats').read().decode())" > "$T/stats.json"
grep -q "127.0.0.1:$RP" "$T/stats.json" || fail "/system_stats argv does not show the redis address: $(cat "$T/stats.json")"
grep -q -- "$PW" "$T/stats.json" && fail "/system_stats shows the redis password"
# a worker without the password is refused with a hint, not left hanging
"$SDFLOW_BIN" worker --redis "$URL" --redis-prefix t "${M[@]}" --no-cache > "$T/nopw.log" 2>&1 &
nopw=$!
for i in $(seq 50); do kill -0 $nopw 2> /dev/null || break; sleep 0.1; done
kill -0 $nopw 2> /dev/null && { kill $nopw; fail "a worker without the redis password kept running"; }
grep -q "SDFLOW_REDIS_PASSWORD" "$T/nopw.log" || fail "no password hint: $(cat "$T/nopw.log")"

# 1. w1 computes everything and shares the small outputs
start_worker w1 --cache "$T/w1.db"
wait_workers "w1 cpu" || fail "/system_stats does not list w1 as a cpu device: $(workers)"
read -r st cached file < <(queue 1)
[ "$st" = success ] || fail "seed 1 on w1: $st ($(tail -n 5 "$T/w1.log"))"
n=$(redis-cli -p "$RP" --scan --pattern 't:cache:*' | wc -l)
[ "$n" -ge 3 ] || fail "w1 shared $n values through redis (expected the text encodings and the latents)"
stop_worker "$WPID"

# 2. w2, with an empty cache of its own, gets both text encodings from redis
start_worker w2 --cache "$T/w2.db"
wait_workers "w2 cpu" || fail "/system_stats after w1 stopped and w2 started: $(workers) (expected w2 alone)"
read -r st cached file < <(queue 2)
[ "$st" = success ] || fail "seed 2 on w2: $st ($(tail -n 5 "$T/w2.log"))"
case ",$cached," in *,6,*) ;; *) fail "w2: CLIPTextEncode 6 not served from the shared cache (cached: $cached)";; esac
case ",$cached," in *,7,*) ;; *) fail "w2: CLIPTextEncode 7 not served from the shared cache (cached: $cached)";; esac
case ",$cached," in *,3,*) fail "w2: the sampler with a new seed was served from a cache (cached: $cached)";; esac
view "$file" > "$T/w2.png"
"$SDFLOW_BIN" run "${SD_TINY_ARGS[@]}" --set 3.seed=2 --no-cache --quiet --output-dir "$T/ref" > /dev/null 2>&1 ||
    fail "sdflow run of the same workflow failed"
cmp -s "$T/w2.png" "$T"/ref/*.png || fail "the image made with shared conditioning differs from sdflow run's"

# 3. what w2 got from redis is in its own cache now: still cached with redis emptied of values
redis-cli -p "$RP" --scan --pattern 't:cache:*' | xargs -r redis-cli -p "$RP" del > /dev/null
read -r st cached file < <(queue 3)
case ",$cached," in *,6,*) ;; *) fail "w2: the value taken from redis was not kept in its own cache (cached: $cached)";; esac
stop_worker "$WPID"

# 4. --shared-cache 0: nothing taken from or given to redis
redis-cli -p "$RP" --scan --pattern 't:cache:*' | xargs -r redis-cli -p "$RP" del > /dev/null
start_worker w3 --no-cache --shared-cache 0
read -r st cached file < <(queue 4)
n=$(redis-cli -p "$RP" --scan --pattern 't:cache:*' | wc -l)
[ "$st" = success ] || fail "seed 4 on w3: $st"
[ "$cached" = - ] || fail "w3 with --shared-cache 0 had cached nodes: $cached"
[ "$n" = 0 ] || fail "w3 with --shared-cache 0 stored $n values in redis"
stop_worker "$WPID"
start_worker w4 --no-cache
read -r st cached file < <(queue 5)
n=$(redis-cli -p "$RP" --scan --pattern 't:cache:*' | wc -l)
[ "$st" = success ] || fail "seed 5 on w4 (--no-cache): $st ($(tail -n 5 "$T/w4.log"))"
[ "$cached" = - ] && [ "$n" = 0 ] || fail "w4 with --no-cache: cached nodes '$cached', $n values in redis"
# w1-w3 stopped with nothing pending: they left the consumer group, w4 is in it
consumers=$(redis-cli -p "$RP" --no-raw xinfo consumers t:jobs workers | grep -A1 '"name"' | grep -o '"w[0-9]*"' | tr -d '"' | sort | tr '\n' ' ')
[ "$consumers" = "w4 " ] || fail "consumers in the group: '$consumers' (expected w4 alone)"

# 5. a prompt whose workers keep dying is recorded as failed after --max-attempts, not retried forever
stop_worker "$WPID"
start_worker w5 --no-cache --max-attempts 1 --claim-timeout 1
w5=$WPID
id=$(submit 7 400)
for i in $(seq 100); do grep -q "prompt $id started" "$T/w5.log" && break; sleep 0.1; done
grep -q "prompt $id started" "$T/w5.log" || fail "w5 never started the long prompt: $(tail -n 3 "$T/w5.log")"
kill -9 $w5
wait $w5 2> /dev/null
start_worker w6 --no-cache --max-attempts 1 --claim-timeout 1
read -r st msg < <(await_error "$id")
[ "$st" = error ] && case "$msg" in *"gave up after 1 attempts"*w5*) true;; *) false;; esac ||
    fail "a prompt whose worker died with --max-attempts 1: '$st' '$msg' (expected an error naming w5)"
grep -q "prompt $id started" "$T/w6.log" && fail "w6 ran the prompt again beyond --max-attempts"

# 6. Redis goes away and comes back empty
redis-cli -p "$RP" shutdown nosave > /dev/null 2>&1
sleep 0.3
code=$(python3 - "$PORT" "$T/tiny.json" << 'PY'
import json, sys, urllib.request, urllib.error
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/prompt", method="POST",
                             data=json.dumps({"prompt": json.load(open(sys.argv[2]))}).encode())
try:
    urllib.request.urlopen(req)
    print("200 -")
except urllib.error.HTTPError as e:
    print(e.code, json.load(e)["error"]["type"])
PY
)
[ "$code" = "503 redis_unavailable" ] || fail "POST /prompt with redis down: $code (expected 503 redis_unavailable)"
python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/')" 2> /dev/null ||
    fail "the page is not served while redis is down"
start_redis
read -r st cached file < <(queue 6)
[ "$st" = success ] || fail "after redis came back: $st (worker: $(tail -n 5 "$T/w6.log"); server: $(grep -v HTTP "$T/serve.log" | tail -n 3))"
grep -q "connected again" "$T/w6.log" || fail "the worker does not say it reconnected"
kill -0 "$WPID" 2> /dev/null || fail "the worker died while redis was away"

# every process ends cleanly on SIGTERM; under ASan/UBSan their reports land in the logs
cleanup
trap - EXIT
grep -l "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" "$T"/*.log > /dev/null &&
    fail "sanitizer reports in $(grep -l "ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|runtime error:" "$T"/*.log)"
for f in serve w1 w2 w3 w4 w6; do grep -q "stopping" "$T/$f.log" || fail "$f did not stop cleanly: $(tail -n 3 "$T/$f.log")"; done
grep -l -- "$PW" "$T"/serve.log "$T"/w*.log > /dev/null && fail "the redis password appears in a log"
sd_test_end "OK"
