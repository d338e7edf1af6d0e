// api_test.mjs - `sdflow serve` driven by a real ComfyUI client
// (@stable-canvas/comfyui-client over `ws`): every example workflow queued,
// its WebSocket progress followed, its images fetched through /view and
// compared byte for byte with `sdflow run`'s for the same workflow; then a
// cached rerun, a validation failure (ComfyUI's error shape), a queued and a
// running prompt cancelled by id, and the read-only endpoints.
// usage: node api_test.mjs BIN SRC WORKDIR MODELS_JSON
import { Client } from '@stable-canvas/comfyui-client';
import WebSocket from 'ws';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ok, done, until, startServer, tweak, sleep } from './lib.mjs';

const [bin, src, dir, modelsJson] = process.argv.slice(2);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
const dirs = ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir,
              '--input-dir', path.join(dir, 'input'), '--temp-dir', path.join(dir, 'temp')];
const server = await startServer(bin, [...dirs, '--output-dir', path.join(dir, 'out'),
                                        '--cache', path.join(dir, 'cache.db')], path.join(dir, 'server.log'));
const base = `http://127.0.0.1:${server.port}`;
const client = new Client({ api_host: `127.0.0.1:${server.port}`, clientId: 'sdflow-api-test', WebSocket, fetch });
const events = []; // every JSON message this client got: {type, data}
for (const t of ['status', 'execution_start', 'execution_cached', 'executing', 'progress', 'executed',
                 'execution_success', 'execution_error', 'execution_interrupted'])
  client.on(t, (data) => events.push({ type: t, data }));
let client_previews = 0;
client.on('b_preview', (blob) => { if (blob && blob.type === 'image/png' && blob.size > 8) client_previews++; });
const of = (type, pid) => events.filter((e) => e.type === type && (!pid || (e.data && e.data.prompt_id === pid)));
const keys = (o) => Object.keys(o || {}).sort().join(',');

try {
  ok(await client.connect(), 'client connects (GET /system_stats + /ws)');
  await until(() => of('status').length > 0, 'the first status message');
  ok(typeof of('status')[0].data?.exec_info?.queue_remaining === 'number', 'status {exec_info: {queue_remaining}}');

  // ---- upload the input picture (multipart, overwrite, subfolder, duplicates)
  const png = fs.readFileSync(setup.input_png);
  const upload = async (name, bytes, fields = {}) => {
    const fd = new FormData();
    fd.append('image', new Blob([bytes], { type: 'image/png' }), name);
    for (const [k, v] of Object.entries(fields)) fd.append(k, v);
    const r = await fetch(`${base}/upload/image`, { method: 'POST', body: fd });
    return { status: r.status, body: await r.json() };
  };
  let u = await upload('example.png', png, { overwrite: 'true' });
  ok(u.status === 200 && u.body.name === 'example.png' && u.body.type === 'input' && u.body.subfolder === '',
     `upload answers {name, subfolder, type}: ${JSON.stringify(u)}`);
  ok(Buffer.compare(fs.readFileSync(path.join(dir, 'input', 'example.png')), png) === 0, 'uploaded bytes land in the input folder');
  u = await upload('example.png', png);
  ok(u.status === 200 && u.body.name === 'example.png', 'same bytes again without overwrite: the existing file is reused');
  u = await upload('example.png', Buffer.concat([png, Buffer.from('x')]));
  ok(u.status === 200 && u.body.name === 'example (1).png', `different bytes without overwrite: "example (1).png", got ${u.body.name}`);
  u = await upload('sub.png', png, { subfolder: 'a/b' });
  ok(u.status === 200 && u.body.subfolder === 'a/b' && fs.existsSync(path.join(dir, 'input', 'a', 'b', 'sub.png')), 'upload into a subfolder');
  let r = await fetch(`${base}/view?filename=sub.png&subfolder=a/b&type=input`);
  ok(r.status === 200 && Buffer.compare(Buffer.from(await r.arrayBuffer()), png) === 0, '/view of an input in a subfolder');
  // an upload far over civetweb's 8 KiB chunks arrives whole (it used to be cut after the first chunk)
  const bigUp = Buffer.alloc(3 * 1024 * 1024 + 77);
  for (let i = 0; i < bigUp.length; i++) bigUp[i] = (i * 2654435761) >>> 24;
  u = await upload('big-upload.bin', bigUp, { overwrite: 'true' });
  ok(u.status === 200 && Buffer.compare(fs.readFileSync(path.join(dir, 'input', 'big-upload.bin')), bigUp) === 0,
     `a 3 MiB upload arrives whole (${u.status}, ${fs.statSync(path.join(dir, 'input', 'big-upload.bin')).size} bytes)`);

  // ---- every example workflow through the client, compared with `sdflow run`
  const names = fs.readdirSync(path.join(src, 'workflows')).filter((f) => f.endsWith('.json')).sort();
  const skipped = [], ran = [];
  const objectInfo = await (await fetch(`${base}/object_info`)).json();
  // A combo value this server does not offer (a model file the tiny set has
  // no stand-in for): such a workflow is not run, and said so below.
  const missingChoice = (w) => {
    for (const [id, n] of Object.entries(w)) {
      const spec = objectInfo[n.class_type]?.input || {};
      for (const [k, v] of Object.entries(n.inputs)) {
        const def = (spec.required || {})[k] || (spec.optional || {})[k];
        if (def && Array.isArray(def[0]) && typeof v === 'string' && !def[0].includes(v)) return `${id}.${k}=${v}`;
      }
    }
    return null;
  };
  for (const f of names) {
    const name = f.replace(/\.json$/, '');
    const wf = tweak(name, JSON.parse(fs.readFileSync(path.join(src, 'workflows', f), 'utf8')), setup, 'example.png');
    const missing = missingChoice(wf);
    if (missing) { skipped.push(`${name} (${missing})`); continue; }
    ran.push(name);
    const wfPath = path.join(dir, `wf_${name}.json`);
    fs.writeFileSync(wfPath, JSON.stringify(wf));
    if (Object.values(wf).some((n) => n.class_type === 'LoraSave')) {
      // An output node that reports nothing to clients (ComfyUI's LoraSave
      // returns no ui): no executed message, as ComfyUI sends none, so the
      // client's enqueue (which waits for one) does not apply; the file is
      // written under the output folder.
      const q = await client.queuePrompt(0, { prompt: wf });
      await until(() => of('execution_success', q.prompt_id).length > 0, `${name}: execution_success`, 180000);
      ok(of('executed', q.prompt_id).length === 0, `${name}: no executed message (ComfyUI sends none for LoraSave)`);
      const saved = path.join(dir, 'out', 'loras');
      ok(fs.existsSync(saved) && fs.readdirSync(saved).some((f) => f.endsWith('_.safetensors')),
         `${name}: the LoRA is written under the output folder`);
      console.log(`ok: ${name} (a file, no client outputs)`);
      continue;
    }
    const progress = [];
    const previewsBefore = client_previews;
    let result;
    try {
      result = await client.enqueue(wf, { progress: (p) => progress.push(p), timeout_ms: 120000 });
    } catch (e) {
      ok(false, `${name}: the client's enqueue failed: ${e.message}`);
      continue;
    }
    const pid = result.prompt_id;
    await until(() => of('execution_success', pid).length > 0, `${name}: execution_success`);
    // (ComfyUI's order: execution_success, then executing with node=null)
    await until(() => of('executing', pid).some((e) => e.data.node === null), `${name}: executing node=null`);
    ok(of('execution_start', pid).length === 1 && typeof of('execution_start', pid)[0].data.timestamp === 'number',
       `${name}: execution_start {prompt_id, timestamp}`);
    ok(of('execution_cached', pid).length === 1 && Array.isArray(of('execution_cached', pid)[0].data.nodes),
       `${name}: execution_cached {nodes, prompt_id}`);
    const executing = of('executing', pid);
    ok(executing.length >= 2 && executing.at(-1).data.node === null && typeof executing[0].data.node === 'string',
       `${name}: executing per node, then node=null`);
    const hasSampler = Object.values(wf).some((n) => ['KSampler', 'SamplerCustomAdvanced'].includes(n.class_type));
    // (checked on this test's own listener: the client's per-prompt one is
    // attached only once the POST has answered, and a fast prompt may be past
    // its first steps by then)
    const progressAll = of('progress', pid).map((e) => e.data);
    if (hasSampler)
      ok(progressAll.length >= 2 && progressAll.every((p) => keys(p) === 'max,node,prompt_id,value') &&
         progressAll.some((p) => p.node === '3' && p.value === p.max),
         `${name}: progress {value, max, prompt_id, node} up to max for the sampler`);
    const executed = of('executed', pid);
    ok(executed.length === 1 && keys(executed[0].data) === 'display_node,node,output,prompt_id' && executed[0].data.output.images.length === 1,
       `${name}: executed {node, display_node, output: {images}, prompt_id}`);
    // (the client also collects the preview frames it saw, as type "buff")
    const urls = result.images.filter((im) => im.type === 'url');
    ok(urls.length === 1, `${name}: the client resolves one image URL`);
    // (frames sent before the client's per-prompt listener exists are not in
    // result.images, so they are counted by a listener of our own)
    if (hasSampler) await until(() => client_previews > previewsBefore, `${name}: preview frames reached the client`, 10000)
      .then(() => ok(true, ''), () => ok(false, `${name}: preview frames reached the client`));
    const served = Buffer.from(await (await fetch(urls[0].data)).arrayBuffer());
    // the same workflow through `sdflow run`, in its own output folder, no cache
    const runOut = path.join(dir, `run_${name}`);
    const run = spawnSync(bin, ['run', wfPath, ...dirs, '--output-dir', runOut, '--no-cache', '--quiet'], { encoding: 'utf8' });
    if (!ok(run.status === 0, `${name}: sdflow run failed: ${run.stderr}`)) continue;
    const file = run.stdout.trim().split('\n')[0];
    ok(served.length > 100 && Buffer.compare(served, fs.readFileSync(file)) === 0,
       `${name}: /view bytes (${served.length}) equal sdflow run's ${file}`);
    console.log(`ok: ${name} (${progressAll.length} progress events, ${progress.length} through the client's callback, ${served.length} bytes)`);
  }
  if (skipped.length) console.log(`note: not run (no such model in the tiny set): ${skipped.join(', ')}`);
  // (the GLIGEN and unCLIP examples whenever setup.sh placed their models)
  for (const must of ['txt2img_sd15', 'img2img_sd15', 'inpaint_sd15', 'image_invert', 'txt2img_sdxl',
                      ...(setup.gligen ? ['gligen_textbox_sd15'] : []), ...(setup.unclip ? ['unclip_sd21'] : [])])
    ok(ran.includes(must), `${must} ran`);

  // ---- the same prompt again: every node a cache hit, executed re-sent
  const wf = JSON.parse(fs.readFileSync(path.join(dir, 'wf_txt2img_sd15.json'), 'utf8'));
  // (every node is a hit, so the prompt may finish before the POST's reply
  // arrives: the events are collected from the start, not awaited per prompt)
  const again = await client.queuePrompt(0, { prompt: wf });
  await until(() => of('execution_success', again.prompt_id).length > 0, 'rerun: execution_success');
  await until(() => of('executing', again.prompt_id).some((e) => e.data.node === null), 'rerun: executing node=null');
  const cached = of('execution_cached', again.prompt_id)[0].data.nodes;
  ok(JSON.stringify([...cached].sort()) === JSON.stringify(Object.keys(wf).sort()) && of('executing', again.prompt_id).length === 1,
     `rerun: execution_cached lists every node (ComfyUI) and nothing executes (${JSON.stringify(cached)})`);
  ok(of('executed', again.prompt_id).length === 1, 'rerun: executed re-sent for the cached output node');

  // ---- a raw WebSocket: binary preview frames as ComfyUI sends them
  const raw = new WebSocket(`ws://127.0.0.1:${server.port}/ws?clientId=raw-observer`);
  const frames = [], texts = [];
  raw.on('message', (data, isBinary) => (isBinary ? frames : texts).push(isBinary ? Buffer.from(data) : JSON.parse(data.toString())));
  await new Promise((res, rej) => { raw.once('open', res); raw.once('error', rej); });
  await until(() => texts.length > 0, 'the raw socket\'s first status');
  ok(texts[0].type === 'status' && texts[0].data.sid === 'raw-observer', 'status names the sid');
  const pw = JSON.parse(JSON.stringify(wf));
  pw['3'].inputs.seed = 4242;
  pw['3'].inputs.steps = 3;
  r = await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: pw, client_id: 'raw-observer' }) });
  const rp = await r.json();
  await until(() => texts.some((m) => m.type === 'execution_success' && m.data.prompt_id === rp.prompt_id), 'raw: execution_success');
  ok(frames.length >= 1 && frames.every((f) => f.readUInt32BE(0) === 1 && f.readUInt32BE(4) === 2 &&
     f.subarray(8, 12).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47]))),
     `preview frames: BE 1 (PREVIEW_IMAGE), BE 2 (PNG), PNG bytes (${frames.length} frames)`);
  ok(!events.some((e) => e.data && e.data.prompt_id === rp.prompt_id), 'another client\'s prompt sends this client nothing');
  // progress_state: per node {value, max, state, node_id, prompt_id, display_node_id, parent_node_id, real_node_id}
  const ps = texts.filter((m) => m.type === 'progress_state' && m.data.prompt_id === rp.prompt_id);
  const lastPs = ps.at(-1)?.data.nodes || {};
  ok(ps.length >= 4 && lastPs['3']?.state === 'finished' && lastPs['3'].value === lastPs['3'].max && lastPs['3'].max === 3 &&
     ps.some((m) => m.data.nodes['3']?.state === 'running' && m.data.nodes['3'].value === 1 && m.data.nodes['3'].max === 3) &&
     lastPs['3'].real_node_id === '3' && lastPs['3'].parent_node_id === null,
     `progress_state follows the sampler: running 1/3 ... finished 3/3 (${JSON.stringify(lastPs['3'])}, ${ps.length} messages)`);
  // ComfyUI's order at the end: status (the queue shrank), then executing null
  await until(() => texts.findIndex((m) => m.type === 'executing' && m.data.node === null && m.data.prompt_id === rp.prompt_id) >= 0, 'raw: executing null');
  const endAt = texts.findIndex((m) => m.type === 'executing' && m.data.node === null && m.data.prompt_id === rp.prompt_id);
  const succAt = texts.findIndex((m) => m.type === 'execution_success' && m.data.prompt_id === rp.prompt_id);
  ok(texts.slice(succAt, endAt).some((m) => m.type === 'status'), `a status message between execution_success and executing(null) (${texts.slice(succAt, endAt + 1).map((m) => m.type)})`);
  ok(client_previews > 0, `the client decoded preview frames as b_preview (${client_previews})`);
  raw.close();

  // ---- a client that announces supports_preview_metadata gets event 4 frames
  const meta = new WebSocket(`ws://127.0.0.1:${server.port}/ws?clientId=meta-observer`);
  const mframes = [], mtexts = [];
  meta.on('message', (data, isBinary) => (isBinary ? mframes : mtexts).push(isBinary ? Buffer.from(data) : JSON.parse(data.toString())));
  await new Promise((res, rej) => { meta.once('open', res); meta.once('error', rej); });
  meta.send(JSON.stringify({ type: 'feature_flags', data: { supports_preview_metadata: true } }));
  await until(() => mtexts.some((m) => m.type === 'feature_flags'), 'the server\'s feature_flags answer');
  const sf = mtexts.find((m) => m.type === 'feature_flags').data;
  ok(sf.supports_preview_metadata === true && sf.max_upload_size === 100 * 1024 * 1024, `server feature_flags ${JSON.stringify(sf)}`);
  pw['3'].inputs.seed = 4343;
  r = await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: pw, client_id: 'meta-observer' }) });
  const mp = await r.json();
  await until(() => mtexts.some((m) => m.type === 'execution_success' && m.data.prompt_id === mp.prompt_id), 'meta: execution_success');
  const m0 = mframes[0];
  const mlen = m0 ? m0.readUInt32BE(4) : 0;
  const mj = m0 ? JSON.parse(m0.subarray(8, 8 + mlen).toString()) : {};
  ok(mframes.length >= 1 && mframes.every((f) => f.readUInt32BE(0) === 4) && mj.node_id === '3' && mj.prompt_id === mp.prompt_id &&
     mj.display_node_id === '3' && mj.real_node_id === '3' && mj.parent_node_id === null && mj.image_type === 'image/png' &&
     m0.subarray(8 + mlen, 12 + mlen).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47])),
     `preview frames with metadata: BE 4, BE length, {node_id, prompt_id, ...} ${JSON.stringify(mj)}, PNG (${mframes.length} frames)`);
  meta.close();

  // ---- validation failure: ComfyUI's error body with every problem
  const bad = JSON.parse(JSON.stringify(wf));
  bad['4'].inputs.ckpt_name = 'no-such-model.safetensors';
  delete bad['6'].inputs.clip;
  bad['3'].inputs.steps = -5;
  delete bad['3'].inputs.seed; // a widget with a default is required all the same (ComfyUI's rule)
  delete bad['6'].inputs.text;
  r = await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: bad, client_id: 'sdflow-api-test' }) });
  const vb = await r.json();
  ok(r.status === 400 && vb.error?.type === 'prompt_outputs_failed_validation' && typeof vb.error.message === 'string',
     `validation failure: 400 with error.type prompt_outputs_failed_validation (${r.status} ${JSON.stringify(vb.error)})`);
  const ne = vb.node_errors || {};
  ok(ne['4']?.errors?.[0]?.type === 'value_not_in_list' && ne['4'].errors[0].extra_info.input_name === 'ckpt_name' &&
     ne['4'].class_type === 'CheckpointLoaderSimple' && ne['4'].dependent_outputs.includes('9'),
     `node_errors[4]: value_not_in_list on ckpt_name, dependent_outputs [9]: ${JSON.stringify(ne['4'])}`);
  ok(ne['6']?.errors?.some((e) => e.type === 'required_input_missing' && e.extra_info.input_name === 'clip'),
     'node_errors[6]: required_input_missing on clip');
  ok(ne['3']?.errors?.some((e) => e.type === 'value_smaller_than_min'), 'node_errors[3]: value_smaller_than_min on steps');
  // no folder of the server in what the client reads (the missing checkpoint's message names the folder)
  const vbText = JSON.stringify(vb);
  ok(!vbText.includes(setup.models_dir) && !vbText.includes(fs.realpathSync(setup.models_dir)) && vbText.includes('<models>/checkpoints'),
     `validation errors name the models folder as <models>, not its path: ${ne['4']?.errors?.[0]?.details}`);
  for (const [id, input, ct] of [['3', 'seed', 'KSampler'], ['6', 'text', 'CLIPTextEncode']]) {
    const e = ne[id]?.errors?.find((x) => x.type === 'required_input_missing' && x.extra_info.input_name === input);
    ok(e && e.message === 'Required input is missing' && ne[id].class_type === ct && ne[id].dependent_outputs.includes('9'),
       `node_errors[${id}]: required_input_missing on ${input} (${ct}), as ComfyUI: ${JSON.stringify(ne[id])}`);
  }
  let threw = null;
  try { await client.queuePrompt(0, { prompt: bad }); } catch (e) { threw = e; }
  ok(threw !== null, 'the client rejects a prompt that fails validation');

  // ---- a runtime failure: execution_error, history status error
  await upload('broken.png', Buffer.from('this is not a PNG file at all'), { overwrite: 'true' });
  const inv = tweak('image_invert', JSON.parse(fs.readFileSync(path.join(src, 'workflows', 'image_invert.json'), 'utf8')), setup, 'broken.png');
  r = await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: inv, client_id: 'sdflow-api-test' }) });
  const eb = await r.json();
  ok(r.status === 200, `a prompt that can only fail at run time is accepted (${r.status} ${JSON.stringify(eb)})`);
  await until(() => of('execution_error', eb.prompt_id).length > 0, 'execution_error');
  const ee = of('execution_error', eb.prompt_id)[0].data;
  ok(keys(ee) === 'current_inputs,current_outputs,exception_message,exception_type,executed,node_id,node_type,prompt_id,timestamp,traceback' &&
     ee.node_id === '1' && ee.node_type === 'LoadImage' && /broken\.png/.test(ee.exception_message) &&
     Array.isArray(ee.current_outputs) && Array.isArray(ee.traceback),
     `execution_error names the node and the file: ${JSON.stringify(ee)}`);
  // ComfyUI's fields: the failed node's inputs as {name: [value]}, every node
  // of the prompt in current_outputs, a Python-style exception class name
  ok(JSON.stringify(ee.current_inputs) === '{"image":["broken.png"]}' &&
     JSON.stringify([...ee.current_outputs].sort()) === JSON.stringify(Object.keys(inv).sort()) &&
     typeof ee.exception_type === 'string' && /^[A-Z][A-Za-z]*Error$/.test(ee.exception_type) && ee.traceback.length === 0,
     `execution_error: current_inputs, current_outputs, exception_type as ComfyUI's (${JSON.stringify(ee)})`);
  // a node that fails with linked inputs: ImageBlur's radius beyond a 16x16 picture
  const blur = {
    1: { class_type: 'LoadImage', inputs: { image: 'example.png' } },
    2: { class_type: 'ImageScale', inputs: { image: ['1', 0], upscale_method: 'nearest-exact', width: 16, height: 16, crop: 'disabled' } },
    3: { class_type: 'ImageBlur', inputs: { image: ['2', 0], blur_radius: 31, sigma: 2.5 } },
    4: { class_type: 'PreviewImage', inputs: { images: ['3', 0] } },
  };
  r = await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: blur, client_id: 'sdflow-api-test' }) });
  const bb = await r.json();
  ok(r.status === 200, `the blur prompt is accepted (${r.status} ${JSON.stringify(bb)})`);
  await until(() => of('execution_error', bb.prompt_id).length > 0, 'execution_error of the blur');
  const be = of('execution_error', bb.prompt_id)[0].data;
  const ci = be.current_inputs || {};
  ok(be.node_id === '3' && be.node_type === 'ImageBlur' && keys(ci) === 'blur_radius,image,sigma' &&
     JSON.stringify(ci.blur_radius) === '[31]' && JSON.stringify(ci.sigma) === '[2.5]' &&
     Array.isArray(ci.image) && ci.image.length === 1 && typeof ci.image[0] === 'string' && /16, 16, 3/.test(ci.image[0]) &&
     JSON.stringify([...be.current_outputs].sort()) === '["1","2","3","4"]',
     `execution_error of a node with a linked input: the picture described, the literals as they are (${JSON.stringify(be)})`);
  await until(async () => (await (await fetch(`${base}/history/${eb.prompt_id}`)).json())[eb.prompt_id], 'the failed prompt in the history');
  const he = (await (await fetch(`${base}/history/${eb.prompt_id}`)).json())[eb.prompt_id];
  ok(he.status.status_str === 'error' && he.status.messages.some((m) => m[0] === 'execution_error'), 'history of the failed prompt: status error');

  // ---- a prompt with one valid and one invalid output: ComfyUI runs the
  // valid one and answers 200 with the other's node_errors
  const part = JSON.parse(JSON.stringify(wf));
  part['3'].inputs.seed = 777;
  part['11'] = { class_type: 'VAEDecode', inputs: { samples: ['3', 0], vae: ['4', 7] } };
  part['12'] = { class_type: 'SaveImage', inputs: { images: ['11', 0], filename_prefix: 'broken' } };
  r = await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: part, client_id: 'sdflow-api-test' }) });
  const pb = await r.json();
  ok(r.status === 200 && pb.node_errors['11']?.errors?.[0]?.type === 'bad_linked_input' &&
     pb.node_errors['11'].dependent_outputs.includes('12') && !pb.node_errors['9'],
     `partly invalid prompt: 200 with node_errors of the dropped output (${r.status} ${JSON.stringify(pb.node_errors)})`);
  await until(() => of('execution_success', pb.prompt_id).length > 0, 'the valid part runs');
  const hp = (await (await fetch(`${base}/history/${pb.prompt_id}`)).json())[pb.prompt_id];
  ok(hp && keys(hp.outputs) === '9' && hp.prompt[4].length === 1 && hp.prompt[4][0] === '9' && hp.prompt[2]['12'],
     'only the valid output ran; the history keeps the prompt as sent and outputs_to_execute [9]');

  // ---- cancel: a queued prompt by /queue delete, the running one by /interrupt {prompt_id}
  const long = (seed) => { const w = JSON.parse(JSON.stringify(wf)); w['3'].inputs.steps = 10000; w['3'].inputs.seed = seed; return w; };
  const a = await client.queuePrompt(0, { prompt: long(11) });
  const b = await client.queuePrompt(0, { prompt: long(12) });
  await until(() => of('progress', a.prompt_id).length > 0, 'the long prompt samples');
  const q = await (await fetch(`${base}/queue`)).json();
  ok(q.queue_running.length === 1 && q.queue_running[0][1] === a.prompt_id && q.queue_pending.length === 1 &&
     q.queue_pending[0][1] === b.prompt_id && q.queue_pending[0].length === 5,
     `GET /queue: [number, prompt_id, prompt, extra_data, outputs] running A, pending B`);
  await client.deleteItem('queue', b.prompt_id);
  await client.interrupt(a.prompt_id);
  await until(() => of('execution_interrupted', a.prompt_id).length > 0, 'execution_interrupted');
  const ei = of('execution_interrupted', a.prompt_id)[0].data;
  ok(keys(ei) === 'executed,node_id,node_type,prompt_id,timestamp' && ei.node_id === '3' && ei.node_type === 'KSampler',
     `execution_interrupted {prompt_id, node_id, node_type, executed}: ${JSON.stringify(ei)}`);
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_running.length === 0, 'the queue to empty');
  const ha = (await (await fetch(`${base}/history/${a.prompt_id}`)).json())[a.prompt_id];
  ok(ha && ha.status.status_str === 'error' && ha.status.completed === false &&
     ha.status.messages.some((m) => m[0] === 'execution_interrupted'), 'history of the interrupted prompt: status error');
  ok(keys(await (await fetch(`${base}/history/${b.prompt_id}`)).json()) === '', 'the deleted prompt never ran');
  ok(of('execution_start', b.prompt_id).length === 0, 'no execution_start for the deleted prompt');

  // ---- history
  const h = await (await fetch(`${base}/history`)).json();
  const hs = h[again.prompt_id];
  ok(hs && hs.status.status_str === 'success' && hs.outputs['9'].images[0].filename && hs.prompt[1] === again.prompt_id &&
     hs.meta['9'].node_id === '9', 'history entry {prompt, outputs, status, meta}');
  ok(Object.keys(await (await fetch(`${base}/history?max_items=1`)).json()).length === 1, '/history?max_items=1');
  // a client-chosen prompt_id, sent twice: one history entry
  for (let k = 0; k < 2; k++) {
    await fetch(`${base}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: wf, prompt_id: 'my-own-id', client_id: 'sdflow-api-test' }) });
    await until(async () => of('execution_success', 'my-own-id').length > k, 'the prompt with its own id');
  }
  const own = await (await fetch(`${base}/history/my-own-id`)).text();
  ok((own.match(/"my-own-id":\{/g) || []).length === 1, 'a prompt_id run twice has one history entry');
  await client.deleteItem('history', again.prompt_id);
  ok(keys(await (await fetch(`${base}/history/${again.prompt_id}`)).json()) === '', 'POST /history delete');
  const hist = await client.getHistory();
  ok(Array.isArray(hist.History) && hist.History.length > 0, 'the client reads /history');

  // ---- read-only endpoints
  const info = await client.getNodeDefs();
  ok(info.KSampler && info.KSampler.input.required.seed && info.SaveImage.output_node === true, '/object_info');
  const one = await (await fetch(`${base}/object_info/KSampler`)).json();
  ok(keys(one) === 'KSampler' && keys(await (await fetch(`${base}/object_info/NoSuchNode`)).json()) === '', '/object_info/{class}');
  ok(Array.isArray(await client.getEmbeddings()), '/embeddings');
  ok((await (await fetch(`${base}/models/checkpoints`)).json()).includes(setup.sd1), '/models/checkpoints');
  ok((await (await fetch(`${base}/models/no_such_folder`)).status) === 404, '/models/{unknown} is 404');
  // ComfyUI's diffusers folder has the extension "folder", which no file matches: listed, always empty
  ok((await (await fetch(`${base}/models`)).json()).includes('diffusers') &&
     JSON.stringify(await (await fetch(`${base}/models/diffusers`)).json()) === '[]', '/models/diffusers');
  const st = await client.getSystemStats();
  ok(st.system && typeof st.system.ram_total === 'number' && st.devices.length === 1, '/system_stats');
  ok((await (await fetch(`${base}/api/prompt`)).json()).exec_info.queue_remaining === 0, '/api/... routes');
  const feat = await (await fetch(`${base}/features`)).json();
  ok(feat.supports_preview_metadata === true && feat.max_upload_size === 100 * 1024 * 1024, `/features ${JSON.stringify(feat)}`);
  const loads = () => server.log().split('\n').filter((l) => l.includes(`checkpoint ${setup.sd1}:`)).length;
  ok(loads() === 1, `the SD1 checkpoint was loaded once for all its prompts (${loads()})`);
  await client.free({ unload_models: true, free_memory: true });
  const c2 = await client.queuePrompt(0, { prompt: long(13) }); // after /free: the model loads again
  await until(() => of('progress', c2.prompt_id).length > 0, 'a prompt after /free samples');
  await client.interrupt();
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_running.length === 0, 'the queue to empty after /free');
  ok(/models and cached results released/.test(server.log()) && loads() === 2, '/free releases models between prompts (loaded again after)');
} catch (e) {
  ok(false, `unexpected: ${e.stack}`);
} finally {
  client.close();
  const code = await server.stop();
  ok(code === 0, `the server stops cleanly on SIGTERM (exit ${code})`);
  const log = server.log();
  ok(/"POST \/prompt[^"]*" 200 /.test(log) && /"POST \/prompt[^"]*" 400 /.test(log), 'requests are logged with their status');
}

// ---- a restarted server: the SQLite cache serves what the first one computed
try {
  const again = await startServer(bin, [...dirs, '--output-dir', path.join(dir, 'out'), '--cache', path.join(dir, 'cache.db')],
                                  path.join(dir, 'server-restarted.log'));
  const ws = new WebSocket(`ws://127.0.0.1:${again.port}/ws?clientId=restart`);
  const msgs = [];
  ws.on('message', (d, isBin) => { if (!isBin) msgs.push(JSON.parse(d.toString())); });
  await new Promise((res, rej) => { ws.once('open', res); ws.once('error', rej); });
  const wf = JSON.parse(fs.readFileSync(path.join(dir, 'wf_txt2img_sd15.json'), 'utf8'));
  const r = await (await fetch(`http://127.0.0.1:${again.port}/prompt`, { method: 'POST', body: JSON.stringify({ prompt: wf, client_id: 'restart' }) })).json();
  await until(() => msgs.some((m) => m.type === 'execution_success' && m.data.prompt_id === r.prompt_id), 'the restarted server\'s run');
  const cachedNodes = msgs.find((m) => m.type === 'execution_cached').data.nodes;
  ok(cachedNodes.includes('9') && !msgs.some((m) => m.type === 'executing' && m.data.node !== null),
     `after a restart the prompt is served from the SQLite cache: nothing executes (${JSON.stringify(cachedNodes)})`);
  ok(!again.log().includes(`checkpoint ${setup.sd1}:`), 'no checkpoint is loaded for it');
  ws.close();
  ok((await again.stop()) === 0, 'the restarted server stops cleanly');
} catch (e) {
  ok(false, `unexpected after the restart: ${e.stack}`);
}
done();
