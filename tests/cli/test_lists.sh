# ComfyUI's list semantics through `sdflow run` (core/executor.h, "Lists"):
# RebatchImages / RebatchLatents (INPUT_IS_LIST, a list output) and the
# nodes after them running once per item. Checked: a batch of 3 images
# rebatched by 2 goes through ImageInvert and SaveImage twice (3 files,
# inverted pixels); a plain LATENT into RebatchLatents is a list of one,
# and SaveLatent after it runs per batch (3 files); PreviewAny after a
# mapped GetImageSize shows one text per item; the report describes list
# outputs; a second run with the cache hits every node.
set -u
. "$(dirname "$0")/lib.sh"
sd_test_begin cli_lists RebatchImages RebatchLatents ImageInvert PreviewAny GetImageSize
sd_test_need_cmd python3
mkdir -p "$T/input"
sd_test_write_png "$T/input/example.png"

cat > "$T/wf.json" << 'J'
{
  "1": {"class_type": "LoadImage", "inputs": {"image": "example.png"}},
  "2": {"class_type": "RepeatImageBatch", "inputs": {"image": ["1", 0], "amount": 3}},
  "3": {"class_type": "RebatchImages", "inputs": {"images": ["2", 0], "batch_size": 2}},
  "4": {"class_type": "ImageInvert", "inputs": {"image": ["3", 0]}},
  "5": {"class_type": "SaveImage", "inputs": {"images": ["4", 0], "filename_prefix": "lists"}},
  "6": {"class_type": "GetImageSize", "inputs": {"image": ["3", 0]}},
  "7": {"class_type": "PreviewAny", "inputs": {"source": ["6", 2]}},
  "8": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 3}},
  "9": {"class_type": "RebatchLatents", "inputs": {"latents": ["8", 0], "batch_size": 1}},
  "10": {"class_type": "SaveLatent", "inputs": {"samples": ["9", 0], "filename_prefix": "lat"}}
}
J
ARGS=(--input-dir "$T/input" --output-dir "$T/out" --cache "$T/cache.db" --quiet)
"$SDFLOW_BIN" run "$T/wf.json" "${ARGS[@]}" --report "$T/r1.json" > /dev/null 2> "$T/err1" || fail "run: $(cat "$T/err1")"
n=$(ls "$T/out"/lists_*.png 2> /dev/null | wc -l)
[ "$n" -eq 3 ] || fail "SaveImage after RebatchImages wrote $n images, not 3: $(ls "$T/out")"
n=$(ls "$T/out"/latents/lat_*.latent "$T/out"/lat_*.latent 2> /dev/null | wc -l)
[ "$n" -eq 3 ] || fail "SaveLatent after RebatchLatents wrote $n files, not 3: $(ls -R "$T/out")"
python3 - "$T/r1.json" "$T/input/example.png" "$T/out" << 'PY' || fail "report / pixels"
import json, os, struct, sys, zlib
r = json.load(open(sys.argv[1]))["nodes"]
bad = 0
def say(m):
    global bad
    print("FAIL:", m); bad += 1
ui = r["7"].get("ui", {})
if ui.get("text") != ["2", "1"]:
    say("PreviewAny after a mapped GetImageSize shows %r, not one batch size per item ['2', '1']" % ui.get("text"))
if r["4"]["outputs"] != ["IMAGE [[2, 16, 16, 3] F32, [1, 16, 16, 3] F32]"]:
    say("the mapped ImageInvert's output is described as %r, not a list of two batches" % r["4"]["outputs"])
def pixels(path):
    data = open(path, "rb").read()
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        t, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if t == b"IHDR": hdr = struct.unpack(">IIBBBBB", body)
        if t == b"IDAT": idat += body
        pos += 12 + n
    w, h, c = hdr[0], hdr[1], {2: 3, 6: 4}[hdr[3]]
    raw, rows, prev = zlib.decompress(idat), [], bytearray(w * c)
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
        rows.append(bytes(line)); prev = line
    return rows
orig = pixels(sys.argv[2])
for name in sorted(os.listdir(sys.argv[3])):
    if name.startswith("lists_") and name.endswith(".png"):
        inv = pixels(os.path.join(sys.argv[3], name))
        # 1 - x saved as uint8(clip(255 y)): 255 - k, or one less where 255 y lands just below
        if any(not 0 <= 255 - orig[y][x] - inv[y][x] <= 1 for y in range(len(orig)) for x in range(len(orig[0]))):
            say("%s is not the inverted picture" % name)
sys.exit(1 if bad else 0)
PY
# the same run again: every node from the cache, no new file
"$SDFLOW_BIN" run "$T/wf.json" "${ARGS[@]}" --report "$T/r2.json" > /dev/null 2> "$T/err2" || fail "rerun: $(cat "$T/err2")"
[ "$(sd_test_count "$T/r2.json" executed)" = 0 ] || fail "the rerun executed $(sd_test_count "$T/r2.json" executed) nodes"
n=$(ls "$T/out"/lists_*.png 2> /dev/null | wc -l)
[ "$n" -eq 3 ] || fail "the cached rerun wrote images again ($n files)"
sd_test_end "ok"
