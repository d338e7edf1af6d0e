#!/usr/bin/env python3
"""extract.py DIR/NAME.png... : write the ComfyUI workflows a PNG carries in
its tEXt chunks, as they are: NAME.api.json from the "prompt" chunk (the API
form the frontend queued) and NAME.ui.json from the "workflow" chunk (the UI
save), in the folder DIR beside this script (DIR: the name of the picture's
folder). Used on comfyanonymous/ComfyUI_examples' flux/*.png and sd3/*.png
(each folder's README.md names the commit)."""
import os
import struct
import sys

KEYS = {b"prompt": "api", b"workflow": "ui"}


def main(paths):
    top = os.path.dirname(os.path.abspath(__file__))
    for path in paths:
        here = os.path.join(top, os.path.basename(os.path.dirname(os.path.abspath(path))))
        os.makedirs(here, exist_ok=True)
        data = open(path, "rb").read()
        if data[:8] != b"\x89PNG\r\n\x1a\n":
            sys.exit("%s: not a PNG" % path)
        name = os.path.splitext(os.path.basename(path))[0]
        pos, found = 8, 0
        while pos + 12 <= len(data):
            n = struct.unpack(">I", data[pos:pos + 4])[0]
            kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
            if kind == b"tEXt":
                key, _, value = body.partition(b"\0")
                if key in KEYS:
                    with open(os.path.join(here, "%s.%s.json" % (name, KEYS[key])), "wb") as f:
                        f.write(value)
                    found += 1
            pos += 12 + n
        if found != len(KEYS):
            sys.exit("%s: %d of the prompt/workflow chunks" % (path, found))


if __name__ == "__main__":
    main(sys.argv[1:])
