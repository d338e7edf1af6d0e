# --device and --gpu-memory on `sdflow run`: without --device a run computes
# on the GPU when the build has CUDA and a GPU is present, else on the CPU,
# and the report says which ("device"); --device cuda where that is not
# possible (no CUDA in the build, no GPU or no driver) fails before any node
# runs with a message naming the option and why, never a crash or a silent
# CPU run; --gpu-memory takes a size, refuses a bad one naming the option,
# and is refused on the CPU backend (nothing to cap); a bad SDFLOW_THREADS or
# SDFLOW_CPU_GEMM is refused naming it. Checked against what
# `--device cuda` does on this machine, so it passes with and without a GPU.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_device EmptyImage SaveImage

cat > "$T/wf.json" <<'JSON'
{"1": {"class_type": "EmptyImage", "inputs": {"width": 16, "height": 16, "batch_size": 1, "color": 255}},
 "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "dev"}}}
JSON
# run NAME [args...]: exit status in $T/NAME.rc, report $T/NAME.json, stderr $T/NAME.err
run() {
    local name=$1; shift
    "$SDFLOW_BIN" run "$T/wf.json" --no-cache --quiet --output-dir "$T/out" --report "$T/$name.json" "$@" \
        > /dev/null 2> "$T/$name.err"
    echo $? > "$T/$name.rc"
}
device_of() { sd_test_flat "$1" | grep -o '"device":"[a-z]*"' | cut -d'"' -f4; }

run cuda --device cuda
rc=$(cat "$T/cuda.rc")
[ "$rc" -le 1 ] || fail "--device cuda: exit $rc (a crash?): $(cat "$T/cuda.err")"
if [ "$rc" = 0 ]; then
    have_gpu=1
    [ "$(device_of "$T/cuda.json")" = cuda ] || fail "--device cuda: the report does not say cuda"
else
    have_gpu=0
    grep -q -- "--device cuda" "$T/cuda.err" || fail "--device cuda: the error does not name the option: $(cat "$T/cuda.err")"
    grep -qi "no usable CUDA device\|not available in this build" "$T/cuda.err" ||
        fail "--device cuda: the error does not say why: $(cat "$T/cuda.err")"
    [ -d "$T/out" ] && ls "$T/out" | grep -q . && fail "--device cuda failed but a node ran"
fi

run auto
[ "$(cat "$T/auto.rc")" = 0 ] || fail "run without --device: $(cat "$T/auto.err")"
want=cpu
[ $have_gpu = 1 ] && want=cuda
[ "$(device_of "$T/auto.json")" = $want ] || fail "no --device: the report says '$(device_of "$T/auto.json")', expected $want"

run cpu --device cpu
[ "$(device_of "$T/cpu.json")" = cpu ] || fail "--device cpu: the report does not say cpu"

# --device cuda:N picks a card (one worker per GPU); anything else is refused naming the value
for bad in gpu cuda:x cuda:; do
    run bad --device "$bad"
    [ "$(cat "$T/bad.rc")" = 1 ] && grep -q -- "--device.*$bad" "$T/bad.err" ||
        fail "--device $bad: not refused naming it: $(cat "$T/bad.err")"
done
run card --device cuda:0
if [ $have_gpu = 1 ]; then
    [ "$(cat "$T/card.rc")" = 0 ] && [ "$(device_of "$T/card.json")" = cuda ] ||
        fail "--device cuda:0: $(cat "$T/card.err")"
else
    [ "$(cat "$T/card.rc")" = 1 ] && grep -q -- "--device cuda" "$T/card.err" ||
        fail "--device cuda:0 without a GPU: $(cat "$T/card.err")"
fi

# --gpu-memory: a bad size is a usage error naming the option
run badmem --device cpu --gpu-memory lots
[ "$(cat "$T/badmem.rc")" = 1 ] && grep -q -- "--gpu-memory" "$T/badmem.err" ||
    fail "--gpu-memory lots: not refused naming the option: $(cat "$T/badmem.err")"
# on the CPU backend there is no device memory to cap: refused, not ignored
run cpumem --device cpu --gpu-memory 1G
[ "$(cat "$T/cpumem.rc")" = 1 ] && grep -q -- "--gpu-memory: the cpu backend has no device memory to cap" "$T/cpumem.err" ||
    fail "--gpu-memory on the CPU: $(cat "$T/cpumem.err")"
if [ $have_gpu = 1 ]; then
    run gpumem --device cuda --gpu-memory 2G
    [ "$(cat "$T/gpumem.rc")" = 0 ] || fail "--device cuda --gpu-memory 2G: $(cat "$T/gpumem.err")"
fi

# the compute-thread and CPU-library variables: a bad value stops the run
# before any node, naming the variable (SDFLOW_THREADS for any device, so
# its message is not put under --device), never a silent default
SDFLOW_THREADS=two run threads --device cpu
[ "$(cat "$T/threads.rc")" = 1 ] && grep -q "SDFLOW_THREADS=two" "$T/threads.err" &&
    ! grep -q -- "--device" "$T/threads.err" ||
    fail "SDFLOW_THREADS=two: $(cat "$T/threads.err")"
SDFLOW_CPU_GEMM=mkl run gemm --device cpu
[ "$(cat "$T/gemm.rc")" = 1 ] && grep -q "SDFLOW_CPU_GEMM=mkl" "$T/gemm.err" ||
    fail "SDFLOW_CPU_GEMM=mkl: $(cat "$T/gemm.err")"
SDFLOW_THREADS=1 run one --device cpu
[ "$(cat "$T/one.rc")" = 0 ] || fail "SDFLOW_THREADS=1: $(cat "$T/one.err")"

sd_test_end "OK"
