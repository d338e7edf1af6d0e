# workflows/inpaint_composite_sd15 (JSON, Lua and UI forms) end to end on a
# random-weight tiny SD1 checkpoint (sdflow synth; no shared data needed):
# LoadImage's MASK (the transparent left half of a 64x64 picture) grown by a
# PrimitiveInt and feathered, an inpaint through SetLatentNoiseMask, and
# ImageCompositeMasked putting the repainted pixels back only inside the
# mask; SaveImage's prefix comes from StringConcatenate. Checked: the file is
# named inpaint_composite_00001_.png; outside the grown mask every pixel is
# the original's, byte for byte (the composite's mask is exactly 0 there);
# inside it the picture changed; the Lua twin and the UI twin save the same
# pixels; a wider grow (--set 12.value=12) repaints the columns it adds.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_inpaint_composite PrimitiveInt GrowMask FeatherMask ImageCompositeMasked StringConcatenate
sd_test_need_cmd python3
sd_test_tiny_sd1 "$T"
mkdir -p "$T/input"

cat > "$T/tool.py" << 'PY'
import struct, sys, zlib

def write_png(path):
    """64x64 RGBA: transparent (LoadImage mask 1) where x < 32."""
    rows = b""
    for y in range(64):
        rows += b"\x00" + b"".join(bytes(((x * 4) % 256, (y * 4) % 256, (x + y) % 256, 0 if x < 32 else 255))
                                   for x in range(64))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 6, 0, 0, 0)) +
                           chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))

def read_png(path):
    """(width, height, channels, rows of bytes) of an 8-bit PNG without interlace."""
    data = open(path, "rb").read()
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        t, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if t == b"IHDR": hdr = struct.unpack(">IIBBBBB", body)
        if t == b"IDAT": idat += body
        pos += 12 + n
    w, h, depth, ctype = hdr[0], hdr[1], hdr[2], hdr[3]
    c = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw, out, prev = zlib.decompress(idat), [], bytearray(w * c)
    for y in range(h):
        f, line = raw[y * (w * c + 1)], bytearray(raw[y * (w * c + 1) + 1:(y + 1) * (w * c + 1)])
        for i in range(len(line)):
            a = line[i - c] if i >= c else 0
            b, cc = prev[i], prev[i - c] if i >= c else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - cc
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - cc)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else cc)) & 255
        out.append(bytes(line))
        prev = line
    return w, h, c, out

def check(orig, result, keep_from):
    """Pixels at x >= keep_from are the original's RGB; some at x < keep_from - 8 changed."""
    w, h, c, o = read_png(orig)
    w2, h2, c2, r = read_png(result)
    bad = 0
    if (w2, h2, c2) != (64, 64, 3):
        print("FAIL: result is %dx%d with %d channels" % (w2, h2, c2)); return 1
    kept = all(r[y][x * 3:x * 3 + 3] == o[y][x * 4:x * 4 + 3] for y in range(64) for x in range(keep_from, 64))
    changed = sum(r[y][x * 3:x * 3 + 3] != o[y][x * 4:x * 4 + 3] for y in range(64) for x in range(keep_from - 8))
    if not kept: print("FAIL: pixels outside the grown mask (x >= %d) are not the original's" % keep_from); bad += 1
    if changed < 64: print("FAIL: only %d pixels inside the mask changed" % changed); bad += 1
    return bad

def same_pixels(a, b):
    return 0 if read_png(a)[3] == read_png(b)[3] else 1

if __name__ == "__main__":
    if sys.argv[1] == "write": write_png(sys.argv[2])
    elif sys.argv[1] == "check": sys.exit(check(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    elif sys.argv[1] == "same": sys.exit(same_pixels(sys.argv[2], sys.argv[3]))
PY
python3 "$T/tool.py" write "$T/input/example.png"

WF="$SDFLOW_SOURCE_DIR/workflows"
ARGS=(--models-dir "$T/models" --tokenizer-dir "$T/tok" --input-dir "$T/input" --no-cache --quiet
      --set 4.ckpt_name=sdflow-random-sd1-tiny.safetensors --set 3.steps=2)
run() { # run OUT_DIR WORKFLOW [ARGS...]
    local out=$1 wf=$2
    shift 2
    "$SDFLOW_BIN" run "$wf" "${ARGS[@]}" --output-dir "$out" "$@" > /dev/null 2> "$out.err" ||
        { fail "$(basename "$wf") $*: $(cat "$out.err")"; return 1; }
}
run "$T/json" "$WF/inpaint_composite_sd15.json" &&
    { [ -f "$T/json/inpaint_composite_00001_.png" ] || fail "no inpaint_composite_00001_.png: $(ls "$T/json")"; }
png="$T/json/inpaint_composite_00001_.png"
# mask 1 for x < 32, grown by 4 (PrimitiveInt 12): the original from x = 36 on
[ -f "$png" ] && { python3 "$T/tool.py" check "$T/input/example.png" "$png" 36 || fail "JSON run"; }
run "$T/lua" "$WF/inpaint_composite_sd15.lua" &&
    { python3 "$T/tool.py" same "$png" "$T/lua/inpaint_composite_00001_.png" || fail "the Lua twin saved other pixels"; }
run "$T/ui" "$WF/ui/inpaint_composite_sd15.json" &&
    { python3 "$T/tool.py" same "$png" "$T/ui/inpaint_composite_00001_.png" || fail "the UI twin saved other pixels"; }
run "$T/wide" "$WF/inpaint_composite_sd15.json" --set 12.value=12 &&
    { python3 "$T/tool.py" check "$T/input/example.png" "$T/wide/inpaint_composite_00001_.png" 44 || fail "grow 12"; }
sd_test_end "ok"
