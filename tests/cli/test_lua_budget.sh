# A Lua workflow that never ends is stopped (issue 14): by its instruction
# budget (--lua-max-instructions, SDFLOW_LUA_MAX_INSTRUCTIONS), by its
# wall-time budget (--lua-timeout, SDFLOW_LUA_TIMEOUT), with an error naming
# the script and line, and by Ctrl-C while it builds the graph (exit 130, a
# report that says cancelled) or while `sdflow run -` waits for its input.
# Before, all three ran forever (SIGINT was not even handled until the graph
# was built); a deadline turns that into a failure.
set -u
: "${SDFLOW_BIN:?}"

T="${SDFLOW_TEST_TMP:-/tmp/sdflow-test}/cli_lua_budget"
rm -rf "$T" && mkdir -p "$T"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
printf 'local x = 0\nwhile true do x = x + 1 end\n' > "$T/loop.lua"
# a pcall inside the script must not swallow the stop
printf 'while true do\n  pcall(function() while true do end end)\nend\n' > "$T/stubborn.lua"

# expect NAME WANT-RC WANT-TEXT -- ARGS...
expect() {
    local name=$1 want=$2 text=$3
    shift 4
    # --foreground: a timeout that fires signals sdflow alone, once
    timeout --foreground 300 "$SDFLOW_BIN" run "$@" --no-cache > /dev/null 2> "$T/$name.err" < /dev/null
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "$name: exit code $rc, expected $want: $(cat "$T/$name.err")"
    grep -qF -- "$text" "$T/$name.err" || fail "$name: no \"$text\" in: $(cat "$T/$name.err")"
}

expect instructions 1 "loop.lua:2: the script ran past its budget of 3000000 Lua instructions" -- \
    "$T/loop.lua" --lua-max-instructions 3000000
SDFLOW_LUA_MAX_INSTRUCTIONS=2000000 expect env 1 "budget of 2000000 Lua instructions" -- "$T/stubborn.lua"
expect timeout 1 "stubborn.lua:2: the script ran longer than its budget of 0.3 s" -- \
    "$T/stubborn.lua" --lua-timeout 0.3 --lua-max-instructions 0
SDFLOW_LUA_TIMEOUT=0.3 expect env_timeout 1 "budget of 0.3 s" -- "$T/loop.lua" --lua-max-instructions 0
expect bad_value 1 "--lua-max-instructions: 'lots' is not a whole number" -- "$T/loop.lua" --lua-max-instructions lots
SDFLOW_LUA_TIMEOUT=-1 expect bad_env 1 "SDFLOW_LUA_TIMEOUT: '-1' is not a number of seconds" -- "$T/loop.lua"
"$SDFLOW_BIN" run --help | grep -q -- "--lua-max-instructions N" || fail "--help does not list --lua-max-instructions"

# wait_exit PID SECONDS: waits for PID to end (polling: a condition, not a
# fixed time) and sets rc to its exit status; one still running after
# SECONDS is killed and rc set to 124.
wait_exit() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        kill -0 "$1" 2> /dev/null || break
        sleep 0.1
    done
    if kill -0 "$1" 2> /dev/null; then
        kill -9 "$1" 2> /dev/null
        wait "$1" 2> /dev/null
        rc=124
        return
    fi
    wait "$1"
    rc=$?
}

# ---- Ctrl-C while the script builds the graph ------------------------------------------
# The script prints once it runs, so the signal is sent while it loops (the
# handler is installed before the script starts). A background job starts
# with SIGINT ignored: sdflow installs its own handler anyway. The signal
# goes to sdflow itself: `timeout` (without --foreground) would forward it
# to its child and then again to its whole process group, a second Ctrl-C
# that takes sdflow's hard-quit path.
printf 'print("looping")\nlocal x = 0\nwhile true do x = x + 1 end\n' > "$T/ctrlc.lua"
"$SDFLOW_BIN" run "$T/ctrlc.lua" --no-cache --lua-max-instructions 0 --report "$T/ctrlc.json" \
    > "$T/ctrlc.out" 2> "$T/ctrlc.err" < /dev/null &
pid=$!
for _ in $(seq 1200); do
    grep -q looping "$T/ctrlc.out" 2> /dev/null && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
done
grep -q looping "$T/ctrlc.out" || fail "ctrl-c: the script never started: $(cat "$T/ctrlc.err")"
kill -INT "$pid"
wait_exit "$pid" 120
[ "$rc" -ne 124 ] || fail "ctrl-c: still running 120 s after Ctrl-C"
[ "$rc" -eq 130 ] || fail "ctrl-c: exit code $rc, expected 130: $(cat "$T/ctrlc.err")"
grep -q "^interrupted" "$T/ctrlc.err" || fail "ctrl-c: no 'interrupted' line: $(cat "$T/ctrlc.err")"
tr -d ' \t\n' < "$T/ctrlc.json" 2> /dev/null | grep -q '"status":"cancelled"' ||
    fail "ctrl-c: the report does not say cancelled: $(cat "$T/ctrlc.json" 2> /dev/null)"

# ---- Ctrl-C while the workflow is read from a pipe that never delivers ----------------
# (`sdflow run -`): the first Ctrl-C stops the read. The signal is sent once
# the process waits on the pipe (its wchan), i.e. after the handler is set.
mkfifo "$T/in.fifo"
exec 3<> "$T/in.fifo" # a writer that never writes: the reader does not see an end
"$SDFLOW_BIN" run - --no-cache > /dev/null 2> "$T/stdin.err" < "$T/in.fifo" &
pid=$!
waiting=0
for _ in $(seq 300); do
    grep -qE "poll|pipe" "/proc/$pid/wchan" 2> /dev/null && { waiting=1; break; }
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
done
if [ "$waiting" -eq 1 ]; then
    kill -INT "$pid"
    wait_exit "$pid" 120
    [ "$rc" -ne 124 ] || fail "stdin: still reading 120 s after Ctrl-C"
    [ "$rc" -eq 130 ] || fail "stdin: exit code $rc, expected 130: $(cat "$T/stdin.err")"
    grep -q "^interrupted" "$T/stdin.err" || fail "stdin: no 'interrupted' line: $(cat "$T/stdin.err")"
else
    echo "note: cannot tell when sdflow waits on stdin (/proc/PID/wchan); stdin case not run"
    kill -9 "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
fi
exec 3>&-

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "lua budget ok"
