// gen_group_nodes.mjs - reference data for legacy group nodes (a UI-format
// file's `workflow/NAME` nodes defined under extra.groupNodes), made by
// ComfyUI's own frontend code: the legacy frontend (ComfyUI_legacy_frontend,
// web/extensions/core/groupNode.js) builds each group node from a selection
// with GroupNodeHandler.fromNodes, as its "Convert to Group Node" menu does;
// the graph is saved with app.graph.serialize() (CASE.ui.json), loaded back
// with app.loadGraphData() as opening the file does, and converted with
// app.graphToPrompt() (CASE.api.json: its `output`). The current frontend
// (v1.35.9) loads the same file and converts it too (CASE.api.current.json
// where it gives another prompt); the manifest's `expected` names the one
// sdflow gives, and `why` where the two differ.
//
// usage (from tests/server, where playwright-core is installed):
//   node ../data/group_nodes/gen_group_nodes.mjs SDFLOW_BIN MODELS_DIR TOKENIZER_DIR CHROMIUM \
//        LEGACY_WEB_DIR CURRENT_FRONTEND_DIR OUT_DIR
// MODELS_DIR needs checkpoints/tiny-sd1.safetensors (the nodes' lists only:
// nothing runs). The server answers /object_info with sdflow's node
// definitions, which equal ComfyUI's (tests/data/comfyui_object_info.json).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { startServer } from '../../server/lib.mjs';

// playwright-core is installed under tests/server (scripts/setup-test-tools.sh)
const { chromium } = createRequire(new URL('../../server/package.json', import.meta.url))('playwright-core');

const [bin, modelsDir, tokDir, browserPath, legacyDir, currentDir, outDir] = process.argv.slice(2);
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'gen-group-nodes-'));
const serve = (front) => startServer(bin, ['--models-dir', modelsDir, '--tokenizer-dir', tokDir,
  '--input-dir', path.join(work, 'input'), '--output-dir', path.join(work, 'out'), '--temp-dir', path.join(work, 'temp'),
  '--user-directory', path.join(work, 'user-' + path.basename(front)), '--no-cache', '--front-end-root', front],
  path.join(work, `server-${path.basename(front)}.log`));
fs.mkdirSync(path.join(work, 'input'), { recursive: true });
// LoadImage's list needs the picture a case names (a 1x1 PNG)
fs.writeFileSync(path.join(work, 'input', 'example.png'), Buffer.from(
  '89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8cfc0000003010100c9fe92ef0000000049454e44ae426082', 'hex'));
const browser = await chromium.launch({ executablePath: browserPath, headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] });

async function openPage(base, ready) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.route(/^https?:\/\/(?!127\.0\.0\.1)/, (r) => r.fulfill({ status: 200, contentType: 'application/json', body: '[]' }));
  page.on('pageerror', (e) => console.log(`page error: ${e.message}`));
  page.on('dialog', (d) => d.accept());
  await page.goto(`${base}/`);
  await page.waitForFunction(ready, null, { timeout: 120000 });
  return { page };
}

// Each case edits the legacy frontend's default graph (ids 3 KSampler, 4
// CheckpointLoaderSimple, 5 EmptyLatentImage, 6 and 7 CLIPTextEncode,
// 8 VAEDecode, 9 SaveImage), groups some nodes and changes widgets of the
// group node afterwards, in the page (window.app, LiteGraph, GroupNodeHandler).
const cases = {
  // two nodes with the same input names: the group's names get prefixes
  encoders: `
    const g = await group([6, 7]);
    g.widgets[0].value = 'a watercolor fox';
    g.widgets[1].value = 'blurry';`,
  // KSampler (seed with control_after_generate) and VAEDecode: the latent
  // output is linked inside only, so hidden
  sampler_decode: `
    const g = await group([3, 8]);
    const w = (n) => g.widgets.find((x) => x.name === n);
    w('seed').value = 42; w('steps').value = 3; w('cfg').value = 6.5; w('sampler_name').value = 'dpmpp_2m';`,
  // the loader with both encoders, used twice: a second instance with other
  // values feeds a second sampler chain
  loader_twice: `
    const g = await group([4, 6, 7]);
    g.widgets.find((x) => x.name.endsWith('text') && x.value.includes('bottle')).value = 'first prompt';
    const g2 = LiteGraph.createNode(g.type); app.graph.add(g2); g2.pos = [100, 900];
    for (const x of g2.widgets) if (x.type === 'customtext' || typeof x.value === 'string' && x.name.endsWith('text')) x.value = 'second ' + x.name;
    const k = LiteGraph.createNode('KSampler'); app.graph.add(k); k.pos = [600, 900];
    const d = LiteGraph.createNode('VAEDecode'); app.graph.add(d);
    const s = LiteGraph.createNode('SaveImage'); app.graph.add(s);
    const out = (node, type, nth = 0) => node.outputs.map((o, i) => [o, i]).filter(([o]) => o.type === type)[nth][1];
    g2.connect(out(g2, 'MODEL'), k, 0);
    g2.connect(out(g2, 'CONDITIONING', 0), k, 1);
    g2.connect(out(g2, 'CONDITIONING', 1), k, 2);
    app.graph.getNodeById(5).connect(0, k, 3);
    k.widgets.find((x) => x.name === 'seed').value = 7;
    k.connect(0, d, 0); g2.connect(out(g2, 'VAE'), d, 1); d.connect(0, s, 0);`,
  // a PrimitiveNode feeding KSampler's seed (a widget converted to an input)
  // grouped with the sampler, and one left outside feeding a grouped node
  primitive_seed: `
    const k = app.graph.getNodeById(3);
    const p = LiteGraph.createNode('PrimitiveNode'); app.graph.add(p); p.pos = [0, 600];
    convert(k, 'seed'); p.connect(0, k, k.inputs.findIndex((i) => i.name === 'seed'));
    p.widgets[0].value = 1234;
    const e = app.graph.getNodeById(5);
    const p2 = LiteGraph.createNode('PrimitiveNode'); app.graph.add(p2); p2.pos = [0, 800];
    convert(e, 'width'); p2.connect(0, e, e.inputs.findIndex((i) => i.name === 'width'));
    p2.widgets[0].value = 320;
    const g = await group([p.id, 3, 5]);
    g.widgets.find((x) => x.name.endsWith('steps')).value = 4;`,
  // a Reroute between the loader's CLIP and both encoders, inside the group
  reroute: `
    const r = LiteGraph.createNode('Reroute'); app.graph.add(r); r.pos = [300, 300];
    const l = app.graph.getNodeById(4);
    l.connect(1, r, 0); r.connect(0, app.graph.getNodeById(6), 0); r.connect(0, app.graph.getNodeById(7), 0);
    const g = await group([r.id, 6, 7]);
    g.widgets[0].value = 'through a reroute';`,
  // a muted group node
  muted: `
    const g = await group([6, 7]);
    const g2 = await group([8, 9], 'decode_save');
    g2.mode = 2;`,
  // a bypassed group node between VAEDecode and SaveImage: SaveImage takes
  // the decoded image through it (the legacy frontend's bypass by type)
  bypassed: `
    const inv = LiteGraph.createNode('ImageInvert'); app.graph.add(inv);
    const blur = LiteGraph.createNode('ImageBlur'); app.graph.add(blur);
    app.graph.getNodeById(8).connect(0, inv, 0); inv.connect(0, blur, 0); blur.connect(0, app.graph.getNodeById(9), 0);
    const g = await group([inv.id, blur.id]);
    g.mode = 4;`,
  // LoadImage (its upload button is a widget too) grouped with a node whose
  // optional input stays open, and a widget turned into an input that stays
  // unlinked (the group shows it as an input with its value)
  load_image: `
    const li = LiteGraph.createNode('LoadImage'); app.graph.add(li);
    li.widgets[0].value = 'example.png';
    const up = LiteGraph.createNode('ImageScaleBy'); app.graph.add(up);
    const enc = LiteGraph.createNode('VAEEncode'); app.graph.add(enc);
    li.connect(0, up, 0); up.connect(0, enc, 0); app.graph.getNodeById(4).connect(2, enc, 1);
    enc.connect(0, app.graph.getNodeById(3), 3);
    convert(up, 'scale_by');
    const g = await group([li.id, up.id, enc.id]);
    g.widgets.find((x) => x.name === 'upscale_method').value = 'bilinear';
    g.widgets.find((x) => x.name === 'scale_by').value = 0.75;`,
  // a widget of the group node turned into an input on the group node and
  // fed by a primitive outside
  group_widget_input: `
    const g = await group([3, 8]);
    convert(g, 'seed');
    const p = LiteGraph.createNode('PrimitiveNode'); app.graph.add(p); p.pos = [0, 600];
    p.connect(0, g, g.inputs.findIndex((i) => i.name === 'seed'));
    p.widgets[0].value = 99;`,
};

// Where the two frontends give different prompts, the one sdflow follows
// (the legacy frontend, which made the group node, unless said here).
const follow = {
  load_image: ['current', 'the legacy frontend also sends the upload button\'s value ("upload": "image"), which is no input of LoadImage and which ComfyUI\'s server ignores; the current frontend does not send it'],
  group_widget_input: ['current', 'the legacy frontend sends the group widget\'s value saved in the file, not the value of the primitive that feeds it; the current frontend sends the primitive\'s value, the one the editor shows'],
  reroute: ['legacy', 'the current frontend drops a link that passes a Reroute inside a group node (the CLIPTextEncode nodes lose their clip, a prompt ComfyUI refuses)'],
  muted: ['legacy', 'the current frontend runs the inner nodes of a muted group node'],
  bypassed: ['legacy', 'the current frontend runs the inner nodes of a bypassed group node'],
};

const legacyServer = await serve(legacyDir);
const currentServer = await serve(currentDir);
const legacy = await openPage(`http://127.0.0.1:${legacyServer.port}`, () => window.app?.graph?._nodes?.length > 0);
const current = await openPage(`http://127.0.0.1:${currentServer.port}`, () => window.app?.graph && window.app.extensionManager?.command);
fs.mkdirSync(outDir, { recursive: true });
const manifest = {
  description: 'Legacy group nodes (UI-format `workflow/NAME` nodes with extra.groupNodes) and the API prompt ComfyUI\'s frontend makes of them',
  generator: 'gen_group_nodes.mjs',
  code: 'ComfyUI_legacy_frontend web/extensions/core/groupNode.js (GroupNodeHandler.fromNodes, GroupNodeConfig, getInnerNodes) and web/scripts/app.js graphToPrompt; ComfyUI frontend v1.35.9 loads each file and converts it too',
  cases: [],
};
for (const [name, body] of Object.entries(cases)) {
  const { ui, api } = await legacy.page.evaluate(async ([name, body]) => {
    const { GroupNodeHandler } = await import('/extensions/core/groupNode.js');
    await window.app.loadGraphData();
    const app = window.app;
    for (const n of app.graph._nodes) for (const w of n.widgets ?? []) if (w.name === 'control_after_generate') w.value = 'fixed';
    // a widget turned into an input, as the node menu's "Convert seed to input"
    const convert = (node, wname) => {
      const w = node.widgets.find((x) => x.name === wname);
      const opt = node.getExtraMenuOptions ? [] : [];
      node.getExtraMenuOptions?.(app.canvas, opt);
      const sub = opt.find((o) => o?.content === 'Convert Widget to Input');
      const item = sub?.submenu?.options?.find((o) => o.content === `Convert ${wname} to input`);
      if (!item) throw new Error(`no menu item to convert ${wname}`);
      item.callback();
      return w;
    };
    const group = async (ids, asName) => {
      const nodes = ids.map((i) => app.graph.getNodeById(i));
      app.canvas.deselectAllNodes(); app.canvas.selectNodes(nodes);
      const groupName = asName ?? name;
      window.prompt = () => groupName;
      const g = await GroupNodeHandler.fromNodes(nodes);
      if (!g) throw new Error('fromNodes made no group node');
      return g;
    };
    const f = new Function('app', 'LiteGraph', 'group', 'convert', `return (async () => {${body}})();`);
    await f(app, window.LiteGraph, group, convert);
    const ui = JSON.parse(JSON.stringify(app.graph.serialize()));
    await app.loadGraphData(JSON.parse(JSON.stringify(ui)));
    const { output } = await app.graphToPrompt();
    return { ui, api: output };
  }, [name, body]);
  fs.writeFileSync(path.join(outDir, `${name}.ui.json`), JSON.stringify(ui, null, 1) + '\n');
  fs.writeFileSync(path.join(outDir, `${name}.api.json`), JSON.stringify(api, null, 1) + '\n');
  const cur = await current.page.evaluate(async (ui) => {
    await window.app.loadGraphData(ui);
    const { output } = await window.app.graphToPrompt();
    for (const n of Object.values(output)) delete n._meta; // titles: the legacy frontend sends none
    return output;
  }, ui);
  const same = JSON.stringify(cur) === JSON.stringify(api);
  if (!same) fs.writeFileSync(path.join(outDir, `${name}.api.current.json`), JSON.stringify(cur, null, 1) + '\n');
  if (!same && !follow[name]) throw new Error(`${name}: the frontends differ and the case does not say which one sdflow follows`);
  const entry = { name, ui: `${name}.ui.json`, expected: `${name}.api.json`, groups: Object.keys(ui.extra?.groupNodes ?? {}),
    legacy_frontend: `${name}.api.json`, current_frontend: same ? `${name}.api.json` : `${name}.api.current.json` };
  if (!same) Object.assign(entry, { expected: follow[name][0] === 'current' ? `${name}.api.current.json` : `${name}.api.json`, why: follow[name][1] });
  manifest.cases.push(entry);
  console.log(`${name}: ${Object.keys(api).length} prompt nodes, current frontend ${same ? 'agrees' : 'differs'}`);
}
fs.writeFileSync(path.join(outDir, 'manifest.json'), JSON.stringify(manifest, null, 1) + '\n');
await browser.close();
await legacyServer.stop();
await currentServer.stop();
fs.rmSync(work, { recursive: true, force: true });
