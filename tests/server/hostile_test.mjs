// hostile_test.mjs - `sdflow serve` against hostile input: oversized
// bodies and uploads, malformed JSON, multipart and request lines, path
// traversal and symlinks in /view and uploads, a WebSocket flood, a full
// queue, bounded history, wrong or missing tokens, a non-local address
// without a token. Every refusal must carry the right status (and a JSON
// error body where the server answers), and the server must keep serving.
// usage: node hostile_test.mjs BIN WORKDIR MODELS_JSON
import WebSocket from 'ws';
import net from 'node:net';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, spawnSync } from 'node:child_process';
import { ok, done, until, startServer, sleep } from './lib.mjs';

const [bin, dir, modelsJson] = process.argv.slice(2);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
for (const d of ['input', 'out', 'temp', 'outside']) fs.mkdirSync(path.join(dir, d), { recursive: true });
fs.writeFileSync(path.join(dir, 'outside', 'secret.txt'), 'secret');
fs.writeFileSync(path.join(dir, 'out', 'fine.png'), fs.readFileSync(setup.input_png));
fs.symlinkSync(path.join(dir, 'outside', 'secret.txt'), path.join(dir, 'out', 'link.png'));
fs.symlinkSync(path.join(dir, 'outside'), path.join(dir, 'out', 'linkdir'));
fs.symlinkSync(path.join(dir, 'outside'), path.join(dir, 'input', 'linkdir'));
const common = ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir, '--input-dir', path.join(dir, 'input'),
                '--output-dir', path.join(dir, 'out'), '--temp-dir', path.join(dir, 'temp'), '--no-cache'];
const server = await startServer(bin, [...common, '--max-body', '64K', '--max-upload', '256K', '--history', '3', '--max-queue', '2', '--ws-max-queued', '16K'],
                                 path.join(dir, 'server.log'));
const base = `http://127.0.0.1:${server.port}`;
const alive = async (what) => {
  const r = await fetch(`${base}/system_stats`).catch((e) => ({ status: `error ${e.message}` }));
  ok(r.status === 200, `the server still serves after ${what} (${r.status})`);
};
const errBody = async (r) => { try { const j = await r.json(); return j && j.error && typeof j.error.type === 'string' ? j.error.type : null; } catch { return null; } };
const post = (p, body, headers = {}) => fetch(`${base}${p}`, { method: 'POST', body, headers });
const rawRequest = (text) => new Promise((resolve) => {
  const sock = net.connect(server.port, '127.0.0.1', () => sock.end(text));
  let got = '';
  sock.on('data', (d) => (got += d.toString('latin1')));
  sock.on('close', () => resolve(got));
  sock.on('error', () => resolve(got));
});

try {
  // ---- sizes
  let r = await post('/prompt', JSON.stringify({ prompt: {}, pad: 'x'.repeat(100 * 1024) }));
  ok(r.status === 413 && (await errBody(r)) === 'payload_too_large', `JSON body over --max-body: 413 (${r.status})`);
  await alive('an oversized body');
  const fd = new FormData();
  fd.append('image', new Blob([Buffer.alloc(400 * 1024, 7)], { type: 'image/png' }), 'big.png');
  r = await fetch(`${base}/upload/image`, { method: 'POST', body: fd });
  ok(r.status === 413, `upload over --max-upload: 413 (${r.status})`);
  ok(!fs.existsSync(path.join(dir, 'input', 'big.png')), 'nothing written for a refused upload');
  await alive('an oversized upload');
  const huge = `GET /system_stats HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(40000)}\r\n\r\n`;
  const hr = await rawRequest(huge);
  ok(/^HTTP\/1\.[01] (413|431|400)/.test(hr) || hr === '', `headers over 16 KiB refused (${hr.slice(0, 30)})`);
  await alive('oversized headers');

  // ---- malformed JSON and requests
  r = await post('/prompt', '{"prompt": {"1": ');
  ok(r.status === 400 && (await errBody(r)) === 'invalid_json', 'truncated JSON: 400 invalid_json');
  r = await post('/prompt', '[1, 2, 3]');
  ok(r.status === 400 && (await errBody(r)) === 'invalid_json', 'a JSON array body: 400');
  r = await post('/prompt', '{"prompt": "a string"}');
  ok(r.status === 400 && (await errBody(r)) === 'invalid_prompt', 'a prompt that is not an object: 400 invalid_prompt');
  r = await post('/prompt', '{"prompt": {"1": {"class_type": "NoSuchNode", "inputs": {}}}}');
  ok(r.status === 400 && (await errBody(r)) === 'invalid_prompt', 'an unknown class_type: 400 invalid_prompt');
  r = await post('/prompt', '{"prompt": {"1": {"inputs": {}}}}');
  ok(r.status === 400 && (await errBody(r)) !== null, 'a node without class_type: 400 with an error body');
  r = await post('/prompt', '{"prompt": {"1": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}}}}');
  ok(r.status === 400 && (await errBody(r)) !== null, 'a self-loop: 400 with an error body');
  r = await post('/prompt', Buffer.from('{"prompt": {}}\u0000junk'));
  ok(r.status === 400, 'a body with a NUL byte: 400');
  r = await post('/queue', '{"delete": "not-a-list"}');
  ok(r.status === 400 && (await errBody(r)) === 'bad_request', '/queue delete that is not a list: 400');
  r = await post('/history', 'nonsense');
  ok(r.status === 400, '/history with nonsense: 400');
  r = await fetch(`${base}/interrupt`);
  ok(r.status === 405 && (await errBody(r)) === 'method_not_allowed', 'GET /interrupt: 405');
  r = await fetch(`${base}/no/such/route`);
  ok(r.status === 404 && (await errBody(r)) === 'not_found', 'unknown route: 404 with an error body');
  const g = await rawRequest('GARBAGE\r\n\r\n');
  ok(/^HTTP\/1\.[01] 4\d\d/.test(g) || g === '', `a garbage request line is refused (${g.slice(0, 20)})`);
  // 400 diamonds (each ImageBatch reads the previous one twice) over a broken
  // loader: a walk that did not remember visited nodes would take 2^400 steps
  const dia = { '0': { class_type: 'LoadImage', inputs: { image: 'missing.png' } } };
  for (let i = 1; i <= 400; i++) dia[String(i)] = { class_type: 'ImageBatch', inputs: { image1: [String(i - 1), 0], image2: [String(i - 1), 0] } };
  dia.out = { class_type: 'SaveImage', inputs: { images: ['400', 0] } };
  r = await post('/prompt', JSON.stringify({ prompt: dia }));
  const db = await r.json();
  ok(r.status === 400 && db.node_errors?.['0']?.dependent_outputs?.[0] === 'out', 'a deep diamond graph over a broken node: 400 naming the dependent output');
  await alive('malformed requests');

  // ---- multipart
  r = await post('/upload/image', 'plain text', { 'Content-Type': 'text/plain' });
  ok(r.status === 400, 'upload that is not multipart: 400');
  r = await post('/upload/image', '--XYZ\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n\r\nabc',
                 { 'Content-Type': 'multipart/form-data; boundary=XYZ' });
  ok(r.status === 400 || r.status === 200, `a multipart body without its closing boundary: ${r.status}`);
  r = await post('/upload/image', 'garbage without any boundary', { 'Content-Type': 'multipart/form-data; boundary=XYZ' });
  ok(r.status === 400, `garbage multipart: 400 (${r.status})`);
  const nofile = new FormData();
  nofile.append('type', 'input');
  r = await fetch(`${base}/upload/image`, { method: 'POST', body: nofile });
  ok(r.status === 400, 'multipart without an image field: 400');
  await alive('malformed multipart');

  // ---- /view confinement
  const view = async (q) => (await fetch(`${base}/view?${q}`)).status;
  ok((await view('filename=fine.png')) === 200, '/view of a plain output file: 200');
  ok((await view('filename=../outside/secret.txt')) === 400, '/view filename with ..: 400');
  ok((await view(`filename=${encodeURIComponent('/etc/passwd')}`)) === 400, '/view absolute filename: 400');
  ok((await view(`filename=${encodeURIComponent('..%2Fsecret')}`)) === 400, '/view encoded ..: 400');
  ok((await view('filename=secret.txt&subfolder=../outside')) === 403, '/view subfolder with ..: 403');
  ok((await view('filename=passwd&subfolder=/etc')) === 403, '/view absolute subfolder: 403');
  ok((await view('filename=link.png')) === 403, '/view of a symlink pointing out of the folder: 403');
  ok((await view('filename=secret.txt&subfolder=linkdir')) === 403, '/view through a symlinked folder: 403');
  ok((await view('filename=fine.png&type=models')) === 400, '/view type outside input/output/temp: 400');
  ok((await view('filename=missing.png')) === 404, '/view of a missing file: 404');
  const vr = await rawRequest(`GET /view/../../../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n`);
  ok(!/root:/.test(vr), 'a dotted request path reaches no file');

  // ---- upload confinement
  const up = async (name, fields = {}) => {
    const f = new FormData();
    f.append('image', new Blob([Buffer.from('x')]), name);
    for (const [k, v] of Object.entries(fields)) f.append(k, v);
    return (await fetch(`${base}/upload/image`, { method: 'POST', body: f })).status;
  };
  ok((await up('../evil.png')) === 400 || !fs.existsSync(path.join(dir, 'evil.png')), 'upload named ../evil.png: refused');
  ok(!fs.existsSync(path.join(dir, 'evil.png')), 'nothing written above the input folder');
  ok((await up('ok.png', { subfolder: '../outside' })) === 400, 'upload into ../outside: 400 (ComfyUI)');
  ok((await up('ok.png', { subfolder: '/tmp' })) === 400, 'upload into an absolute subfolder: 400 (ComfyUI)');
  ok((await up('ok.png', { subfolder: 'linkdir' })) === 403, 'upload through a symlinked folder: 403');
  ok(!fs.existsSync(path.join(dir, 'outside', 'ok.png')), 'nothing written outside through the symlink');
  ok((await up('ok.png', { type: 'models' })) === 400, 'upload type outside input/output/temp: 400');
  await alive('traversal attempts');

  // ---- WebSocket: flood and an oversized message
  const flood = new WebSocket(`ws://127.0.0.1:${server.port}/ws?clientId=flood`);
  await new Promise((res, rej) => { flood.once('open', res); flood.once('error', rej); });
  const closed = new Promise((res) => flood.once('close', (code) => res(code)));
  for (let i = 0; i < 3000 && flood.readyState === WebSocket.OPEN; i++) flood.send('{"type":"feature_flags","data":{}}');
  const code = await Promise.race([closed, sleep(10000).then(() => 'still open')]);
  ok(code !== 'still open', `a WebSocket flood gets the client disconnected (close ${code})`);
  const big = new WebSocket(`ws://127.0.0.1:${server.port}/ws?clientId=big`);
  await new Promise((res, rej) => { big.once('open', res); big.once('error', rej); });
  const bigClosed = new Promise((res) => big.once('close', (c) => res(c)));
  big.send('x'.repeat(200 * 1024));
  ok((await Promise.race([bigClosed, sleep(10000).then(() => 'still open')])) !== 'still open', 'a 200 KiB WebSocket message closes the client');
  const fine = new WebSocket(`ws://127.0.0.1:${server.port}/ws?clientId=fine`);
  const first = await new Promise((res, rej) => { fine.once('message', (d) => res(JSON.parse(d.toString()))); fine.once('error', rej); });
  ok(first.type === 'status', 'a well-behaved WebSocket client is still served');
  fine.close();
  await alive('a WebSocket flood');

  // ---- a WebSocket client that never reads must not stall the prompts
  const slow = spawn('python3', [path.join(path.dirname(new URL(import.meta.url).pathname), 'slow_reader.py'), String(server.port), 'slow']);
  await new Promise((res, rej) => { slow.stdout.once('data', res); slow.once('exit', (c) => rej(new Error(`slow reader exited ${c}`))); });
  // every prompt of that client sends it ~0.7 KB of messages; fully cached
  // image prompts finish in milliseconds, so a few hundred soon fill the
  // socket buffers (~200 KB on loopback) and then its queue (16K here)
  const inv0 = JSON.parse(fs.readFileSync(path.join(setup.src, 'workflows', 'image_invert.json'), 'utf8'));
  fs.copyFileSync(setup.input_png, path.join(dir, 'input', 'example.png'));
  let last = null, sent = 0;
  const dropped = () => /ws: client slow dropped \(over 16384 bytes/.test(server.log());
  while (!dropped() && sent < 3000) {
    const r = await post('/prompt', JSON.stringify({ prompt: inv0, client_id: 'slow' }));
    if (r.status === 503) { await sleep(5); continue; } // --max-queue 2
    last = (await r.json()).prompt_id;
    sent++;
  }
  ok(dropped(), `a client that never reads is dropped once its queue is over --ws-max-queued (${sent} prompts)`);
  await until(async () => (await (await fetch(`${base}/history/${last}`)).json())[last], 'the last prompt to finish');
  ok(true, 'prompts of a client that never reads keep completing');
  slow.kill('SIGKILL');
  await alive('a client that never reads');

  // ---- full queue and bounded history
  const wf = JSON.parse(fs.readFileSync(path.join(setup.src, 'workflows', 'txt2img_sd15.json'), 'utf8'));
  wf['4'].inputs.ckpt_name = setup.sd1;
  Object.assign(wf['5'].inputs, { width: 64, height: 64 });
  const long = (seed) => { const w = JSON.parse(JSON.stringify(wf)); w['3'].inputs.steps = 10000; w['3'].inputs.seed = seed; return { prompt: w }; };
  const q1 = await (await post('/prompt', JSON.stringify(long(1)))).json();
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_running.length === 1, 'the long prompt to run');
  ok((await post('/prompt', JSON.stringify(long(2)))).status === 200 && (await post('/prompt', JSON.stringify(long(3)))).status === 200,
     'two pending prompts accepted (--max-queue 2)');
  r = await post('/prompt', JSON.stringify(long(4)));
  ok(r.status === 503 && (await errBody(r)) === 'queue_full', `a third pending prompt: 503 queue_full (${r.status})`);
  await post('/queue', JSON.stringify({ clear: true }));
  await post('/interrupt', JSON.stringify({ prompt_id: q1.prompt_id }));
  await until(async () => (await (await fetch(`${base}/queue`)).json()).queue_running.length === 0, 'the queue to empty');
  const inv = JSON.parse(fs.readFileSync(path.join(setup.src, 'workflows', 'image_invert.json'), 'utf8'));
  fs.copyFileSync(setup.input_png, path.join(dir, 'input', 'example.png'));
  const ids = [];
  for (let i = 0; i < 4; i++) {
    inv['4'].inputs.filename_prefix = `inv${i}`; // four different prompts
    const id = (await (await post('/prompt', JSON.stringify({ prompt: inv }))).json()).prompt_id;
    ids.push(id);
    await until(async () => (await (await fetch(`${base}/history/${id}`)).json())[id], 'the prompt in the history');
  }
  const hist = await (await fetch(`${base}/history`)).json();
  ok(Object.keys(hist).length === 3 && !hist[ids[0]] && !hist[q1.prompt_id] && hist[ids[3]], `--history 3 keeps the newest three (${Object.keys(hist).length})`);
  await alive('a full queue');
} catch (e) {
  ok(false, `unexpected: ${e.stack}`);
}
const stopped = await server.stop();
ok(stopped === 0, `the first server stops cleanly (${stopped})`);
const log = server.log();
ok(/" 413 /.test(log) && /" 403 /.test(log) && /" 405 /.test(log), 'refusals are logged with their status');

// ---- a token
const tok = 'test-token-0123456789';
const s2 = await startServer(bin, [...common, '--token', tok], path.join(dir, 'server2.log'));
const b2 = `http://127.0.0.1:${s2.port}`;
try {
  let r = await fetch(`${b2}/system_stats`);
  ok(r.status === 401 && r.headers.get('www-authenticate') === 'Bearer' && (await errBody(r)) === 'unauthorized', 'no token: 401 with WWW-Authenticate');
  r = await fetch(`${b2}/system_stats`, { headers: { Authorization: 'Bearer wrong-token-0123456789' } });
  ok(r.status === 401, 'a wrong token: 401');
  r = await fetch(`${b2}/system_stats`, { headers: { Authorization: `Bearer ${tok}x` } });
  ok(r.status === 401, 'the token with one more character: 401');
  r = await fetch(`${b2}/system_stats`, { headers: { Authorization: `Bearer ${tok}` } });
  ok(r.status === 200, 'the right token: 200');
  r = await fetch(`${b2}/system_stats?token=${tok}`);
  ok(r.status === 200, 'the right token as ?token=: 200');
  r = await fetch(`${b2}/prompt`, { method: 'POST', body: '{}', headers: { Authorization: 'Basic abc' } });
  ok(r.status === 401, 'another auth scheme: 401');
  const refused = await new Promise((res) => {
    const w = new WebSocket(`ws://127.0.0.1:${s2.port}/ws`);
    w.once('open', () => { w.close(); res(false); });
    w.once('error', () => res(true));
    w.once('unexpected-response', () => res(true));
  });
  ok(refused, 'a WebSocket without the token is refused');
  const w = new WebSocket(`ws://127.0.0.1:${s2.port}/ws?token=${tok}`);
  const m = await new Promise((res, rej) => { w.once('message', (d) => res(JSON.parse(d.toString()))); w.once('error', rej); });
  ok(m.type === 'status', 'a WebSocket with ?token= is served');
  w.close();
} catch (e) {
  ok(false, `unexpected: ${e.stack}`);
}
await s2.stop();
ok(!s2.log().includes(tok), 'the token never appears in the log');

// ---- a non-local address needs a token or --insecure; short tokens are refused
let p = spawnSync(bin, ['serve', ...common, '--listen', '0.0.0.0', '--port', '0'], { encoding: 'utf8', timeout: 20000 });
ok(p.status === 1 && /--token/.test(p.stderr) && /--insecure/.test(p.stderr), `--listen 0.0.0.0 without a token is refused: ${p.stderr.trim()}`);
p = spawnSync(bin, ['serve', ...common, '--token', 'short', '--port', '0'], { encoding: 'utf8', timeout: 20000 });
ok(p.status === 1 && /at least 8/.test(p.stderr), 'a token under 8 characters is refused');
done();
