# The REPL through a real terminal (tmux): build a graph, run it, change one
# input, rerun and check that only the downstream nodes executed; errors keep
# the session and the graph; undo; line editing (Ctrl-A, history); save/load
# as JSON and Lua; help and nodes; Tab completion; Ctrl-C; quit.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_repl LoadImage ImageScale ImageInvert SaveImage
command -v tmux > /dev/null || { echo "SKIP: tmux is not installed"; exit 77; }

mkdir -p "$T/input" "$T/out"
printf '%s' 'iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAYAAACddGYaAAAAHUlEQVR4nGNgYDjxP4DhBMMCIM3AUAHkVAA5QBoAiIwL9aAmuykAAAAASUVORK5CYII=' \
    | base64 -d > "$T/input/in.png"
SOCK="$T/tmux.sock"
tm() { tmux -S "$SOCK" "$@"; }
cleanup() { tm kill-server > /dev/null 2>&1; }
trap cleanup EXIT

tm new-session -d -s repl -x 220 -y 50 \
    "cd '$T' && HOME='$T' '$SDFLOW_BIN' repl --no-cache --input-dir input --output-dir out 2> '$T/stderr'; echo REPL-EXITED \$? > '$T/exit'; sleep 30"
tm set-option -t repl history-limit 20000 > /dev/null

screen() { tm capture-pane -p -J -S -20000 -t repl 2> /dev/null; }
# wait_for PATTERN [COUNT]: until the screen has COUNT lines matching PATTERN
wait_for() {
    local want="${2:-1}" i
    for i in $(seq 1 200); do
        [ "$(screen | grep -c -- "$1")" -ge "$want" ] && return 0
        sleep 0.1
    done
    fail "timed out waiting for '$1' (x$want)"
    screen | grep -v "^sdflow> ^C$" | tail -25
    return 1
}
send() { tm send-keys -t repl -l "$1"; tm send-keys -t repl Enter; }
# type_visible TEXT: types TEXT (no Enter) until it shows on the prompt line.
# libedit can drop typeahead while it sets the terminal up for a new line, so
# under load keys sent right after the last output may vanish; retyping is
# safe because a dropped attempt left nothing on the line.
type_visible() {
    local i
    for i in $(seq 1 20); do
        tm send-keys -t repl -l "$1"
        sleep 0.3
        screen | grep -v '^[[:space:]]*$' | tail -1 | grep -qF "$1" && return 0
    done
    fail "'$1' never showed on the prompt line"
}

wait_for 'sdflow> ' || exit 1
send 'img = LoadImage{image = "in.png"}'
send 'sc = ImageScale{image = img.IMAGE, upscale_method = "bilinear", width = 8, height = 8, crop = "disabled"}'
send 'inv = ImageInvert{image = sc}'
send 'SaveImage{images = inv, filename_prefix = "r"}'
send 'run()'
wait_for '^done: ' 1
screen | grep -q '^executed: #1 LoadImage, #2 ImageScale, #3 ImageInvert, #4 SaveImage$' ||
    fail "first run did not execute all four nodes"

# change one input: only ImageScale and what is below it run again
send 'sc.width = 16'
send 'run()'
wait_for '^done: ' 2
last_exec=$(screen | grep '^executed:' | tail -1)
last_cached=$(screen | grep '^cached:' | tail -1)
[ "$last_exec" = "executed: #2 ImageScale, #3 ImageInvert, #4 SaveImage" ] || fail "rerun executed: '$last_exec'"
[ "$last_cached" = "cached:   #1 LoadImage" ] || fail "rerun cached: '$last_cached'"
[ -f "$T/out/r_00002_.png" ] || fail "the rerun wrote no second PNG"

# errors never end the session nor lose the graph
send 'img.NOPE'
wait_for "error: repl:.*has no output or input 'NOPE'"
send 'error("boom")'
wait_for 'error: .*boom'
send 'for i = 1,'
send '3 do x = i end'
send 'print("x is", x)'
wait_for '^x is[[:space:]]*3$'
send 'Node("NoSuchNode", {a = 1})'
send 'run()'
wait_for 'unknown' 1
wait_for '^not run: ' 1
send 'remove(node("5"))'
wait_for 'removed #5'

# Ctrl-C drops the line being typed, and stops a runaway loop, not the session
type_visible 'half typed'
tm send-keys -t repl C-c
wait_for 'half typed^C'
sleep 0.5 # libedit resets the terminal for the next line: typeahead may be dropped
send 'while true do end'
wait_for 'sdflow> while true do end'
for i in $(seq 1 20); do
    sleep 0.3
    tm send-keys -t repl C-c
    screen | grep -q 'error: interrupted' && break
done
wait_for 'error: interrupted'
send 'print("still", 1)'
wait_for '^still[[:space:]]*1$'

# undo takes back a whole line
send 'sc.width = 32'
send 'undo()'
wait_for 'undone'
send 'print("width", sc.width)'
wait_for '^width[[:space:]]*16$'

# line editing: Ctrl-A moves to the start of the line; Up recalls history
type_visible 'rint("edited", 6 * 7)'
tm send-keys -t repl C-a
tm send-keys -t repl -l 'p'
tm send-keys -t repl Enter
wait_for '^edited[[:space:]]*42$'
tm send-keys -t repl Up
tm send-keys -t repl Enter
wait_for '^edited[[:space:]]*42$' 2

# Tab completes node types and commands
type_visible 'print(ImageInv'
tm send-keys -t repl Tab
sleep 0.3
tm send-keys -t repl -l '== nil, "completed")'
tm send-keys -t repl Enter
wait_for '^false[[:space:]]*completed$'

# save and load both forms; a reloaded graph hits the in-memory results
send 'save("g.lua")'
send 'save("g.json")'
wait_for 'saved 4 nodes to g.json'
send 'clear()'
send 'show()'
wait_for '(empty graph)'
send 'load("g.lua")'
wait_for 'loaded 4 nodes from g.lua'
send 'run()'
wait_for '^done: ' 3
[ "$(screen | grep '^executed:' | tail -1)" = "executed: none" ] || fail "reloaded graph executed nodes again"
send 'load("g.json")'
wait_for 'loaded 4 nodes from g.json'
send 'show()'
wait_for '^#2 ImageScale'
screen | grep -q '^    width = 16$' || fail "show() lacks the width"
screen | grep -q '^    image <- #1.IMAGE$' || fail "show() lacks the link"

send 'help("ImageScale")'
wait_for 'upscale_method'
send 'nodes("invert")'
wait_for '^ImageInvert '
send 'help()'
wait_for 'undo()'

send 'quit()'
for i in $(seq 1 100); do [ -f "$T/exit" ] && break; sleep 0.1; done
grep -q 'REPL-EXITED 0' "$T/exit" 2> /dev/null || fail "repl did not exit with 0 after quit()"
[ -f "$T/g.lua" ] && [ -f "$T/g.json" ] || fail "save() wrote no file"
grep -q 'run()' "$T/.sdflow_history" 2> /dev/null || fail "no history file written"
if [ -s "$T/stderr" ]; then echo "stderr of the repl:"; cat "$T/stderr"; fi

# without a terminal (a pipe) it reads plain lines; a workflow given on the
# command line is loaded first; end of input ends the session
printf 'show()\nrun()\nsc = node("2")\nsc.width = 4\nrun()\n' |
    (cd "$T" && "$SDFLOW_BIN" repl g.json --no-cache --no-history --input-dir input --output-dir out2 > "$T/piped" 2>&1) ||
    fail "piped session failed: $(cat "$T/piped")"
grep -q 'loaded 4 nodes from g.json' "$T/piped" || fail "repl WORKFLOW did not load it"
grep -q 'executed: #2 ImageScale, #3 ImageInvert, #4 SaveImage' "$T/piped" || fail "piped rerun: $(cat "$T/piped")"
if (cd "$T" && "$SDFLOW_BIN" repl missing.json --no-history < /dev/null > /dev/null 2>&1); then
    fail "repl with a missing workflow succeeded"
fi

sd_test_end "repl tests passed"
