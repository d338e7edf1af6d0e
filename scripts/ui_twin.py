#!/usr/bin/env python3
"""ui_twin.py - write the UI-format twin of an API-format workflow, shaped
as ComfyUI's editor saves it ("Save", version 0.4): nodes with id, type, pos,
size, flags, order, mode, inputs/outputs carrying link ids, properties,
widgets_values with the frontend-only widgets (control_after_generate after
a seed, the upload button of LoadImage), the links table, groups, config,
extra.ds. Used to make workflows/ui/*.json, which tests/cli/test_ui_workflows.sh
runs against their API twins.

usage: ui_twin.py NODES.json API.json OUT.json [decorations...]
  NODES.json     `sdflow nodes --json` (input order, widget types, outputs)
  --note TEXT             add a Note node (ignored by the conversion)
  --group TITLE           add a group box around every node
  --reroute ID.INPUT      route the link into that input through a Reroute
  --primitive ID.INPUT    turn that widget into an input fed by a PrimitiveNode
  --bypassed ID.INPUT     put a bypassed node of the link's type on that link
  --muted-preview ID      add a muted PreviewImage fed by output 0 of node ID
  --control VALUE         control_after_generate value (default "fixed")

The decorations never change what runs: the twin converts to the API form
of API.json exactly (`sdflow export --json` prints the same text).
"""
import json
import sys

LITERALS = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")  # COMBO: a V3 choice list
# A node that passes a value of this type through when bypassed, with the
# widgets_values ComfyUI saves for it.
BYPASS_NODES = {
    "LATENT": ("LatentUpscaleBy", ["nearest-exact", 1.5]),
    "IMAGE": ("ImageInvert", []),
    "MODEL": ("LoraLoaderModelOnly", ["some_lora.safetensors", 1.0]),
    "CONDITIONING": ("ConditioningZeroOut", []),
}


class Twin:
    def __init__(self, nodes_info, api):
        self.info = nodes_info
        self.api = api
        self.nodes = []
        self.links = []
        self.by_id = {}
        self.next_link = 1
        self.next_node = max(int(k) for k in api) + 1
        self.control = "fixed"

    def spec(self, ct):
        info = self.info[ct]
        order = [(n, False) for n in info["input_order"].get("required", [])]
        order += [(n, True) for n in info["input_order"].get("optional", [])]
        allin = dict(info["input"].get("required", {}))
        allin.update(info["input"].get("optional", {}))
        return info, order, allin

    @staticmethod
    def is_widget(s):
        t = s[0]
        return (isinstance(t, list) or t in LITERALS) and not (len(s) > 1 and s[1].get("forceInput"))

    def build(self):
        for nid, n in self.api.items():
            ct = n["class_type"]
            info, order, allin = self.spec(ct)
            node = {"id": int(nid), "type": ct, "pos": [0, 0], "size": [315, 100], "flags": {},
                    "order": 0, "mode": 0, "inputs": [], "outputs": [],
                    "properties": {"cnr_id": "comfy-core", "ver": "0.3.44", "Node name for S&R": ct},
                    "widgets_values": []}
            title = n.get("_meta", {}).get("title")
            if title and title != info["display_name"]:
                node["title"] = title
            upload = False
            for optional in (False, True):
                for name, opt in order:
                    if opt != optional:
                        continue
                    s = allin[name]
                    v = n["inputs"].get(name)
                    if self.is_widget(s):
                        linked = isinstance(v, list)
                        default = s[1].get("default") if len(s) > 1 else None
                        if default is None and isinstance(s[0], list) and s[0]:
                            default = s[0][0]
                        node["widgets_values"].append(default if linked or v is None else v)
                        if s[0] == "INT" and name in ("seed", "noise_seed"):
                            node["widgets_values"].append(self.control)
                        if len(s) > 1 and s[1].get("image_upload"):
                            upload = True
                        if linked:  # a widget converted to an input
                            t = "COMBO" if isinstance(s[0], list) else s[0]
                            node["inputs"].append({"name": name, "type": t, "widget": {"name": name},
                                                   "link": None, "_src": v})
                    else:
                        slot = {"localized_name": name, "name": name, "type": s[0], "link": None}
                        if optional:
                            slot["shape"] = 7
                        if isinstance(v, list):
                            slot["_src"] = v
                        node["inputs"].append(slot)
                if upload and not optional:
                    node["widgets_values"].append("image")
                    upload = False
            for i, (t, name) in enumerate(zip(info["output"], info["output_name"])):
                node["outputs"].append({"localized_name": name, "name": name, "type": t, "links": [],
                                        "slot_index": i})
            if not node["widgets_values"]:
                del node["widgets_values"]
            self.nodes.append(node)
            self.by_id[int(nid)] = node
        for node in self.nodes:
            for i, slot in enumerate(node["inputs"]):
                src = slot.pop("_src", None)
                if src:
                    self.connect(int(src[0]), src[1], node, i)

    def connect(self, src, src_slot, dst, dst_slot):
        lid = self.next_link
        self.next_link += 1
        out = self.by_id[src]["outputs"][src_slot]
        t = out["type"]
        self.links.append([lid, src, src_slot, dst["id"], dst_slot, t])
        out["links"].append(lid)
        dst["inputs"][dst_slot]["link"] = lid
        return lid

    def unlink(self, dst, dst_slot):
        lid = dst["inputs"][dst_slot]["link"]
        link = next(l for l in self.links if l[0] == lid)
        self.links.remove(link)
        self.by_id[link[1]]["outputs"][link[2]]["links"].remove(lid)
        dst["inputs"][dst_slot]["link"] = None
        return link

    def add_node(self, ct, inputs, outputs, widgets=None, mode=0, title=None):
        node = {"id": self.next_node, "type": ct, "pos": [0, 0], "size": [315, 60], "flags": {}, "order": 0,
                "mode": mode, "inputs": inputs, "outputs": outputs, "properties": {}}
        if ct in self.info:
            node["properties"] = {"cnr_id": "comfy-core", "ver": "0.3.44", "Node name for S&R": ct}
        if widgets is not None:
            node["widgets_values"] = widgets
        if title:
            node["title"] = title
        self.next_node += 1
        self.nodes.append(node)
        self.by_id[node["id"]] = node
        return node

    def target(self, spec):
        nid, name = spec.split(".", 1)
        node = self.by_id[int(nid)]
        for i, slot in enumerate(node["inputs"]):
            if slot["name"] == name:
                return node, i
        raise SystemExit("node %s has no linked input %s" % (nid, name))

    def reroute(self, spec):
        dst, slot = self.target(spec)
        link = self.unlink(dst, slot)
        r = self.add_node("Reroute", [{"name": "", "type": "*", "link": None}],
                          [{"name": "", "type": link[5], "links": [], "slot_index": 0}],
                          mode=0)
        r["properties"] = {"showOutputText": False, "horizontal": False}
        self.connect(link[1], link[2], r, 0)
        self.connect(r["id"], 0, dst, slot)

    def bypassed(self, spec):
        dst, slot = self.target(spec)
        link = self.unlink(dst, slot)
        ct, widgets = BYPASS_NODES[link[5]]
        info, order, allin = self.spec(ct)
        inputs = [{"localized_name": n, "name": n, "type": allin[n][0], "link": None}
                  for n, _ in order if not self.is_widget(allin[n])]
        outputs = [{"localized_name": nm, "name": nm, "type": t, "links": [], "slot_index": i}
                   for i, (t, nm) in enumerate(zip(info["output"], info["output_name"]))]
        b = self.add_node(ct, inputs, outputs, widgets, mode=4)
        k = next(i for i, s in enumerate(inputs) if s["type"] == link[5])
        self.connect(link[1], link[2], b, k)
        out = next(i for i, o in enumerate(outputs) if o["type"] == link[5])
        self.connect(b["id"], out, dst, slot)

    def primitive(self, spec):
        nid, name = spec.split(".", 1)
        node = self.by_id[int(nid)]
        info, order, allin = self.spec(node["type"])
        # the widget's value: its place among widgets_values
        names = []
        for optional in (False, True):
            for n, opt in order:
                if opt == optional and self.is_widget(allin[n]):
                    names.append(n)
                    if allin[n][0] == "INT" and n in ("seed", "noise_seed"):
                        names.append(None)  # control_after_generate
        value = node["widgets_values"][names.index(name)]
        s = allin[name]
        t = "COMBO" if isinstance(s[0], list) else s[0]
        node["inputs"].append({"name": name, "type": t, "widget": {"name": name}, "link": None})
        # a primitive has its own control widget for numbers and combos
        # (combos also a filter text)
        widgets = [value] + ([self.control] if t in ("INT", "FLOAT") else [self.control, ""] if t == "COMBO" else [])
        p = self.add_node("PrimitiveNode", [], [{"name": "connect to widget input", "type": t, "links": [],
                          "slot_index": 0, "widget": {"name": name}}], widgets)
        p["properties"] = {"Run widget replace on values": False}
        self.connect(p["id"], 0, node, len(node["inputs"]) - 1)

    def muted_preview(self, nid):
        p = self.add_node("PreviewImage", [{"localized_name": "images", "name": "images", "type": "IMAGE",
                                            "link": None}], [], mode=2)
        self.connect(int(nid), 0, p, 0)

    def note(self, text):
        self.add_node("Note", [], [], [text])["properties"] = {"text": ""}

    def layout(self):
        # columns by link depth, rows in id order; execution order by depth
        depth = {}
        def d(n):
            if n["id"] in depth:
                return depth[n["id"]]
            depth[n["id"]] = 0
            srcs = [l[1] for l in self.links if l[3] == n["id"]]
            depth[n["id"]] = 1 + max((d(self.by_id[s]) for s in srcs), default=-1)
            return depth[n["id"]]
        rows = {}
        for n in sorted(self.nodes, key=lambda n: n["id"]):
            col = d(n)
            row = rows.get(col, 0)
            rows[col] = row + 1
            n["pos"] = [40 + 380 * col, 60 + 230 * row]
            widgets = len(n.get("widgets_values", []))
            slots = max(len(n["inputs"]), len(n["outputs"]))
            n["size"] = [315 if widgets else 210, 26 + 22 * slots + 24 * widgets]
        for i, n in enumerate(sorted(self.nodes, key=lambda n: (depth[n["id"]], n["id"]))):
            n["order"] = i
        for n in self.nodes:
            for o in n["outputs"]:
                if not o["links"]:
                    o["links"] = None if n["type"] != "Reroute" else []

    def group(self, title):
        xs = [n["pos"][0] for n in self.nodes] + [n["pos"][0] + n["size"][0] for n in self.nodes]
        ys = [n["pos"][1] for n in self.nodes] + [n["pos"][1] + n["size"][1] for n in self.nodes]
        self.groups.append({"id": 1, "title": title, "bounding": [min(xs) - 20, min(ys) - 50,
                            max(xs) - min(xs) + 40, max(ys) - min(ys) + 70],
                            "color": "#3f789e", "font_size": 24, "flags": {}})

    def document(self):
        return {"id": "00000000-0000-4000-8000-0000000000%02d" % (len(self.nodes) % 100), "revision": 0,
                "last_node_id": max(n["id"] for n in self.nodes), "last_link_id": self.next_link - 1,
                "nodes": sorted(self.nodes, key=lambda n: n["order"]),
                "links": self.links, "groups": self.groups, "config": {},
                "extra": {"ds": {"scale": 1.0, "offset": [0, 0]}, "frontendVersion": "1.23.4"},
                "version": 0.4}


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    info = json.load(open(argv[1]))
    api = json.load(open(argv[2]))
    t = Twin(info, api)
    t.groups = []
    args = argv[4:]
    if "--control" in args:
        t.control = args[args.index("--control") + 1]
    t.build()
    later = []
    for i in range(0, len(args), 2):
        opt, val = args[i], args[i + 1]
        if opt == "--note":
            t.note(val)
        elif opt == "--reroute":
            t.reroute(val)
        elif opt == "--primitive":
            t.primitive(val)
        elif opt == "--bypassed":
            t.bypassed(val)
        elif opt == "--muted-preview":
            t.muted_preview(val)
        elif opt == "--group":
            later.append(val)
        elif opt != "--control":
            sys.exit("unknown option " + opt)
    t.layout()
    for g in later:
        t.group(g)
    with open(argv[3], "w") as f:
        json.dump(t.document(), f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
