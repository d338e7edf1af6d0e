// redis_test.mjs - `sdflow serve --redis` with three `sdflow worker`s, each
// with its own output, input and temp folders and cache (as if on three
// machines; only the models folder is shared), over a Redis server of the
// test's own (docs/scaling.md):
//   - 60 prompts queued over HTTP and followed on a WebSocket; one worker is
//     killed (-9) in the middle of a prompt: every prompt ends in the history
//     once, with success, the killed worker's prompt run again by another
//     worker, output names unique across the workers, every image served by
//     the server's /view (which shares no folder with the workers), a few
//     byte for byte equal to `sdflow run`'s;
//   - a prompt interrupted by id while its worker is dead is recorded as
//     interrupted by the worker that takes it over, not run again;
//   - two prompts running longer than --claim-timeout on live workers are
//     not run twice (heartbeat); queued prompts deleted or cleared never run;
//     a running prompt interrupted by id ends as interrupted, the other goes
//     on (then interrupted without an id); /free reaches every worker;
//   - an uploaded picture reaches the worker that runs a LoadImage prompt; a
//     broken one fails the prompt once (execution_error), not retried;
//   - workers stopped (SIGTERM), one in the middle of a prompt: it leaves the
//     prompt for another worker; with no worker running, queued prompts
//     survive a server restart (listed by a new server's /queue) and run
//     once workers come back, the cut one again from the start.
// (Redis going away and coming back is cli.worker_redis's.)
// usage: node redis_test.mjs BIN SRC WORKDIR MODELS_JSON
import WebSocket from 'ws';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { ok, done, until, tweak, sleep } from './lib.mjs';

const [bin, src, dir, modelsJson] = process.argv.slice(2);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
const CLAIM_TIMEOUT = 3; // seconds, the workers' --claim-timeout
const N_PROMPTS = 60;
const SID = 'redis-test';
const prefix = `sdflow-test-${process.pid}-${Date.now()}`;

// ---- child processes: every one is killed at the end, also on failure
const children = new Set();
function killAll() {
  for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => { killAll(); process.exit(1); });
// (a hang anywhere must not leave processes behind nor wait for ctest's limit)
setTimeout(() => { console.log('FAIL: the test ran over 540 s'); killAll(); process.exit(1); }, 540000).unref();

// Starts CMD ARGS with stdout and stderr in logPath; resolves once the log
// matches `ready`, rejects when the process exits first or after 30 s.
function launch(name, cmd, args, logPath, ready) {
  const out = fs.openSync(logPath, 'w');
  const proc = spawn(cmd, args.map(String), { stdio: ['ignore', out, out] });
  fs.closeSync(out);
  const c = {
    name, proc, logPath,
    log: () => fs.readFileSync(logPath, 'utf8'),
    exited: new Promise((res) => proc.once('exit', (code, sig) => res(code ?? sig))),
    // SIGTERM (or SIG), resolves with the exit code (or the signal's name);
    // SIGKILL after 20 s (then resolves with 'SIGKILL')
    stop: async (sig = 'SIGTERM') => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
      const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
      const code = await c.exited;
      clearTimeout(t);
      return code;
    },
  };
  children.add(c);
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = setInterval(() => {
      const text = c.log();
      const m = text.match(ready);
      if (m) { clearInterval(poll); c.match = m; resolve(c); }
      else if (proc.exitCode !== null || proc.signalCode !== null || Date.now() - t0 > 60000) {
        clearInterval(poll);
        reject(new Error(`${name} did not start: ${text}`));
      }
    }, 50);
  });
}

const freePort = () => new Promise((res, rej) => {
  const s = net.createServer();
  s.once('error', rej);
  s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
});

// ---- Redis: Debian's redis-server, no persistence, its own folder
const redisDir = path.join(dir, 'redis');
fs.mkdirSync(redisDir, { recursive: true });
let redis = null, redisPort = 0;
const startRedis = (log) => launch('redis-server', 'redis-server',
  ['--port', redisPort, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', redisDir,
   '--daemonize', 'no', '--logfile', ''], path.join(dir, log), /Ready to accept connections/);
for (let attempt = 0; !redis && attempt < 3; attempt++) { // (the free port may be taken meanwhile)
  redisPort = await freePort();
  try {
    redis = await startRedis(`redis-${attempt}.log`);
  } catch (e) {
    if (attempt === 2) { console.log(`FAIL: ${e.message}`); process.exit(1); }
  }
}
const redisUrl = `redis://127.0.0.1:${redisPort}`;
const rcli = (...args) => {
  const r = spawnSync('redis-cli', ['-p', String(redisPort), ...args], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : `redis-cli failed: ${r.stderr}`;
};

// ---- the server and the workers: no folder in common but the models
const models = ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir];
const own = (who) => {
  const d = path.join(dir, who);
  for (const sub of ['out', 'in', 'temp']) fs.mkdirSync(path.join(d, sub), { recursive: true });
  return ['--output-dir', path.join(d, 'out'), '--input-dir', path.join(d, 'in'), '--temp-dir', path.join(d, 'temp')];
};
const redisArgs = ['--redis', redisUrl, '--redis-prefix', prefix];
let serverStarts = 0;
const startServer = () => launch('server', bin, ['serve', '--port', 0, ...redisArgs, ...models, ...own('server'), '--no-cache'],
                                 path.join(dir, `server-${++serverStarts}.log`), /listening on http:\/\/[^:]+:(\d+)\//);
const workerLogs = []; // every log of every worker start, for the per-prompt counts below
const workers = new Map(); // name -> the running process
async function startWorker(name) {
  const logPath = path.join(dir, `${name}-${workerLogs.length}.log`);
  workerLogs.push({ name, logPath });
  const w = await launch(name, bin, ['worker', ...redisArgs, '--name', name, '--claim-timeout', CLAIM_TIMEOUT,
                                     ...models, ...own(name), '--cache', path.join(dir, name, 'cache.db')],
                         logPath, new RegExp(`sdflow worker ${name}: ready`));
  workers.set(name, w);
  return w;
}
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
// the worker logs' lines about prompt ID: [{worker, line}]
const linesAbout = (id) => workerLogs.flatMap(({ name, logPath }) =>
  fs.readFileSync(logPath, 'utf8').split('\n').filter((l) => l.includes(`prompt ${id}`)).map((line) => ({ worker: name, line })));
// (a worker logs "prompt ID: attempt K on NAME" when it starts a run, "prompt
// ID reclaimed from OTHER (attempt K)" before that when it took the prompt
// over, and "prompt ID done|failed|interrupted: ..." at the end)
const starts = (id) => linesAbout(id).filter((l) => new RegExp(`prompt ${esc(id)}: attempt \\d+ on `).test(l.line));
const ends = (id) => linesAbout(id).filter((l) => new RegExp(`prompt ${esc(id)} (done|failed|interrupted)`).test(l.line));

// ---- HTTP and WebSocket helpers
let server = null, baseUrl = '', ws = null;
const events = []; // every JSON message on the test's WebSocket: {type, data}
const frames = []; // and every binary one (previews)
const of = (type, pid) => events.filter((e) => e.type === type && (!pid || (e.data && e.data.prompt_id === pid)));
async function connect() {
  baseUrl = `http://127.0.0.1:${server.match[1]}`;
  ws = new WebSocket(`ws://127.0.0.1:${server.match[1]}/ws?clientId=${SID}`);
  ws.on('message', (d, isBinary) => { if (isBinary) frames.push(Buffer.from(d)); else events.push(JSON.parse(d.toString())); });
  await new Promise((res, rej) => { ws.once('open', res); ws.once('error', rej); });
}
const getJson = async (p) => (await fetch(`${baseUrl}${p}`)).json();
const post = async (p, body) => {
  const r = await fetch(`${baseUrl}${p}`, { method: 'POST', body: JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
};
async function queue(prompt) {
  const r = await post('/prompt', { prompt, client_id: SID });
  if (r.status !== 200 || !r.body.prompt_id) throw new Error(`POST /prompt: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.prompt_id;
}
// /history parsed, and its raw text (a prompt id twice would be lost by JSON.parse)
async function history() {
  const raw = await (await fetch(`${baseUrl}/history?max_items=10000`)).text();
  return { raw, h: JSON.parse(raw) };
}
const entriesOf = (raw, id) => (raw.match(new RegExp(`"${esc(id)}"\\s*:\\s*\\{`, 'g')) || []).length;
// (polled every 200 ms: each /history reads every entry from Redis).
// Waits as long as prompts keep arriving in the history: it gives up only
// when none has arrived for stall_ms (an ASan build on a loaded machine
// takes many minutes for 60 prompts, and that is not a failure).
async function waitHistory(ids, what, stall_ms = 120000) {
  for (let t0 = Date.now(), seen = -1; ;) {
    const { h } = await history();
    const n = ids.filter((id) => h[id]).length;
    if (n === ids.length) return;
    if (n > seen) { seen = n; t0 = Date.now(); }
    if (Date.now() - t0 > stall_ms) throw new Error(`timed out waiting for ${what} (${n} there, none new for ${stall_ms / 1000} s)`);
    await sleep(200);
  }
}
const view = async (im) => {
  const q = new URLSearchParams({ filename: im.filename, subfolder: im.subfolder, type: im.type });
  const r = await fetch(`${baseUrl}/view?${q}`);
  return { status: r.status, bytes: Buffer.from(await r.arrayBuffer()) };
};
const images = (entry) => Object.values(entry?.outputs || {}).flatMap((o) => o.images || []);
const isPng = (b) => b.length > 100 && b.subarray(0, 4).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47]));

// `sdflow run` of the same workflow in a folder of its own, no cache: its file's bytes
function runLocally(name, wf, inputDir) {
  const wfPath = path.join(dir, `wf_${name}.json`);
  fs.writeFileSync(wfPath, JSON.stringify(wf));
  const args = ['run', wfPath, ...models, '--output-dir', path.join(dir, `run_${name}`), '--no-cache', '--quiet'];
  if (inputDir) args.push('--input-dir', inputDir);
  const r = spawnSync(bin, args, { encoding: 'utf8' });
  if (r.status !== 0) return { error: r.stderr };
  return { bytes: fs.readFileSync(r.stdout.trim().split('\n')[0]) };
}

const txt2img = tweak('txt2img_sd15', JSON.parse(fs.readFileSync(path.join(src, 'workflows', 'txt2img_sd15.json'), 'utf8')),
                      setup, 'example.png'); // 64x64, 2 steps
const prompt = (seed, steps = 2) => {
  const w = JSON.parse(JSON.stringify(txt2img));
  Object.assign(w['3'].inputs, { seed, steps });
  return w;
};
const LONG_STEPS = 150;     // a couple of seconds here: a worker is killed in one
const ENDLESS_STEPS = 10000; // runs until interrupted

try {
  server = await startServer();
  await connect();
  for (const n of ['w1', 'w2', 'w3']) await startWorker(n);
  ok(true, 'redis, the server and three workers start');

  // ---- 60 prompts, one worker killed in the middle of one
  const sent = []; // {id, seed, steps}
  for (let i = 0; i < N_PROMPTS; i++) {
    const seed = 1000 + i, steps = i % 10 === 4 ? LONG_STEPS : 2;
    sent.push({ id: await queue(prompt(seed, steps)), seed, steps });
  }
  const longIds = sent.filter((p) => p.steps === LONG_STEPS).map((p) => p.id);
  // the first long prompt some worker is sampling (its progress reached the
  // WebSocket) and has not finished
  let victim = null, victimId = null;
  await until(() => {
    for (const id of longIds) {
      const s = starts(id);
      if (s.length === 1 && of('progress', id).length > 0 && ends(id).length === 0) {
        victim = workers.get(s[0].worker);
        victimId = id;
        return true;
      }
    }
    return false;
  }, 'a worker running a long prompt', 300000);
  ok(await victim.stop('SIGKILL') === 'SIGKILL', `${victim.name} killed (-9) while running ${victimId}`);
  workers.delete(victim.name);
  ok(ends(victimId).length === 0, `${victim.name} was in the middle of ${victimId} when killed`);
  await waitHistory(sent.map((p) => p.id), `the ${N_PROMPTS} prompts in the history`, 300000);

  const { raw, h } = await history();
  const bad = sent.filter((p) => h[p.id].status?.status_str !== 'success' || h[p.id].status?.completed !== true);
  ok(bad.length === 0, `every prompt succeeded (not: ${bad.map((p) => `${p.id} ${JSON.stringify(h[p.id].status)}`).join('; ')})`);
  const twice = sent.filter((p) => entriesOf(raw, p.id) !== 1);
  ok(twice.length === 0, `each prompt is once in /history (not: ${twice.map((p) => `${p.id} x${entriesOf(raw, p.id)}`).join(', ')})`);
  const redo = starts(victimId).filter((s) => s.worker !== victim.name);
  ok(redo.length === 1 && /attempt 2/.test(redo[0].line),
     `the killed worker's prompt was run again by another worker: ${JSON.stringify(linesAbout(victimId))}`);
  const runTwice = sent.filter((p) => p.id !== victimId && starts(p.id).length !== 1);
  ok(runTwice.length === 0, `every other prompt started exactly once (not: ${runTwice.map((p) => JSON.stringify(starts(p.id))).join('; ')})`);
  const ranOn = new Set(sent.flatMap((p) => starts(p.id).map((s) => s.worker)));
  ok(ranOn.size === 3, `all three workers ran prompts (${[...ranOn].join(', ')})`);
  ok(sent.every((p) => of('execution_success', p.id).length === 1),
     'the WebSocket got execution_success once per prompt (the workers\' messages through Redis)');
  ok(of('execution_start', victimId).length === 2, 'execution_start twice for the killed worker\'s prompt (two runs)');
  ok(frames.length > 0 && frames.every((f) => f.length > 12 && f.readUInt32BE(0) === 1 && f.readUInt32BE(4) === 2 &&
     f.subarray(8, 12).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47]))),
     `preview frames from the workers reach the WebSocket as ComfyUI's (BE 1, BE 2, PNG): ${frames.length}`);

  const names = new Map(); // subfolder/filename -> prompt id
  let dup = null, notServed = null, count = 0;
  for (const p of sent) {
    const ims = images(h[p.id]);
    if (ims.length !== 1) { ok(false, `${p.id}: one image in the history's outputs: ${JSON.stringify(h[p.id].outputs)}`); continue; }
    const key = `${ims[0].subfolder}/${ims[0].filename}`;
    if (names.has(key)) dup = `${key} (${names.get(key)} and ${p.id})`;
    names.set(key, p.id);
    const v = await view(ims[0]);
    if (v.status !== 200 || !isPng(v.bytes)) notServed = `${key}: ${v.status}, ${v.bytes.length} bytes`;
    else count++;
    p.bytes = v.bytes;
  }
  ok(dup === null, `no output name twice across the workers (${dup})`);
  ok(notServed === null && count === N_PROMPTS, `every image downloads through the server's /view (${count}; ${notServed})`);
  ok(fs.readdirSync(path.join(dir, 'server', 'out')).length === 0, 'the server\'s own output folder stays empty (/view served them from Redis)');
  for (const p of [sent[0], sent.find((q) => q.id === victimId)]) {
    const r = runLocally(`seed${p.seed}`, prompt(p.seed, p.steps));
    if (ok(!r.error, `sdflow run of seed ${p.seed}: ${r.error}`))
      ok(p.bytes && Buffer.compare(p.bytes, r.bytes) === 0, `seed ${p.seed}${p.id === victimId ? ' (the rerun one)' : ''}: /view bytes equal sdflow run's`);
  }

  // ---- a prompt cancelled while its worker is dead is not run by the worker
  // that takes it over: it is recorded as interrupted
  const d = await queue(prompt(4001, ENDLESS_STEPS));
  await until(() => of('progress', d).length > 0 && starts(d).length === 1, 'the prompt to cancel samples');
  const dWorker = starts(d)[0].worker;
  ok(await workers.get(dWorker).stop('SIGKILL') === 'SIGKILL', `${dWorker} killed while running ${d}`);
  workers.delete(dWorker);
  let r = await post('/interrupt', { prompt_id: d });
  ok(r.status === 200, `POST /interrupt {prompt_id} of a prompt whose worker is dead: ${r.status}`);
  await startWorker('w4'); // (two live workers again)
  const queued = async (id) => { const q = await getJson('/queue'); return [...q.queue_running, ...q.queue_pending].some((e) => e[1] === id); };
  await until(async () => starts(d).length > 1 || !(await queued(d)), 'the cancelled prompt to leave the queue', 60000);
  if (!ok(starts(d).length === 1, `the cancelled prompt was not run again: ${JSON.stringify(linesAbout(d))}`)) {
    await post('/interrupt', { prompt_id: d }); // (it would run for minutes)
    await waitHistory([d], 'the cancelled prompt, run again, interrupted again', 60000);
  }
  await waitHistory([d], 'the cancelled prompt\'s history entry', 60000);
  const hd = (await history()).h[d];
  ok(hd.status.status_str === 'error' && hd.status.messages.some((m) => m[0] === 'execution_interrupted'),
     `the cancelled prompt is recorded as interrupted: ${JSON.stringify(hd.status)}`);
  // (the worker publishes the message before it records the entry, but the
  // message reaches this client through the server, so /history can be first)
  await until(() => of('execution_interrupted', d).length > 0, 'execution_interrupted for the cancelled prompt', 30000).catch(() => {});
  ok(of('execution_interrupted', d).length === 1, 'execution_interrupted for it on the WebSocket');

  // ---- two prompts longer than --claim-timeout on live workers (both busy),
  // one queued behind them deleted, the running ones interrupted one by one
  const a = await queue(prompt(5001, ENDLESS_STEPS));
  const b = await queue(prompt(5002, ENDLESS_STEPS));
  await until(() => starts(a).length > 0 && starts(b).length > 0, 'both workers on the long prompts');
  const c = await queue(prompt(5003)), c2 = await queue(prompt(5004)), c3 = await queue(prompt(5005));
  const q = await getJson('/queue');
  ok(q.queue_pending.map((e) => e[1]).join() === [c, c2, c3].join() && q.queue_running.length === 2,
     `GET /queue: two running, three pending (${JSON.stringify([q.queue_running.map((e) => e[1]), q.queue_pending.map((e) => e[1])])})`);
  r = await post('/queue', { delete: [c] });
  ok(r.status === 200, `POST /queue {delete: [queued id]}: ${r.status}`);
  ok((await getJson('/queue')).queue_pending.map((e) => e[1]).join() === [c2, c3].join(), 'the deleted prompt left the queue');
  r = await post('/queue', { clear: true });
  const qc = await getJson('/queue');
  ok(r.status === 200 && qc.queue_pending.length === 0 && qc.queue_running.length === 2,
     `POST /queue {clear: true} empties the pending prompts, the running ones go on (${r.status})`);
  // (long enough for a dead worker's prompt to be reclaimed twice over)
  await sleep(CLAIM_TIMEOUT * 2500);
  ok(ends(a).length === 0 && ends(b).length === 0, 'the long prompts still run');
  ok(starts(a).length === 1 && starts(b).length === 1,
     `a prompt running longer than --claim-timeout on a live worker is not run again: ${JSON.stringify([...linesAbout(a), ...linesAbout(b)])}`);
  r = await post('/interrupt', { prompt_id: a });
  ok(r.status === 200, `POST /interrupt {prompt_id}: ${r.status}`);
  await waitHistory([a], 'the interrupted prompt in the history', 60000);
  let hh = (await history()).h;
  ok(hh[a].status.status_str === 'error' && hh[a].status.completed === false &&
     hh[a].status.messages.some((m) => m[0] === 'execution_interrupted'),
     `the interrupted prompt: status error with execution_interrupted (${JSON.stringify(hh[a].status)})`);
  ok(of('execution_interrupted', a).length === 1, 'execution_interrupted on the WebSocket');
  ok(ends(b).length === 0 && !hh[b], 'the other running prompt goes on');
  await post('/interrupt', {}); // (no id: whatever runs)
  await waitHistory([b], 'the second interrupted prompt', 60000);
  hh = (await history()).h;
  ok(hh[b].status.messages.some((m) => m[0] === 'execution_interrupted'), 'POST /interrupt without an id interrupts the other');
  ok([c, c2, c3].every((id) => !hh[id] && starts(id).length === 0 && of('execution_start', id).length === 0),
     'the deleted and cleared prompts never ran');

  // ---- POST /free reaches every worker (each empties its memo between prompts)
  r = await post('/free', { unload_models: true, free_memory: true });
  ok(r.status === 200, `POST /free: ${r.status}`);
  await until(() => [...workers.values()].every((w) => /models and cached results released \(\/free\)/.test(w.log())),
              'every worker to act on /free', 30000);

  // ---- an upload to the server, used by a worker with its own empty input folder
  const png = fs.readFileSync(setup.input_png);
  const fd = new FormData();
  fd.append('image', new Blob([png], { type: 'image/png' }), 'redis-upload.png');
  const up = await fetch(`${baseUrl}/upload/image`, { method: 'POST', body: fd });
  const ub = await up.json();
  ok(up.status === 200 && ub.name === 'redis-upload.png', `upload: ${up.status} ${JSON.stringify(ub)}`);
  const inv = tweak('image_invert', JSON.parse(fs.readFileSync(path.join(src, 'workflows', 'image_invert.json'), 'utf8')), setup, ub.name);
  const ui = await queue(inv);
  await waitHistory([ui], 'the LoadImage prompt', 60000);
  hh = (await history()).h;
  ok(hh[ui].status.status_str === 'success', `the LoadImage prompt ran on a worker: ${JSON.stringify(hh[ui].status)}`);
  const runIn = path.join(dir, 'run_input');
  fs.mkdirSync(runIn, { recursive: true });
  fs.writeFileSync(path.join(runIn, ub.name), png);
  const ims = images(hh[ui]);
  const rl = runLocally('invert', inv, runIn);
  const served = ims.length === 1 ? await view(ims[0]) : { status: 0, bytes: Buffer.alloc(0) };
  ok(!rl.error && served.status === 200 && Buffer.compare(served.bytes, rl.bytes) === 0,
     `the LoadImage prompt's image equals sdflow run's (${served.status}, ${served.bytes.length} bytes; ${rl.error})`);
  // an upload that is no picture: the worker's run fails, and a failed
  // prompt is recorded once, not handed to another worker
  const broken = new FormData();
  broken.append('image', new Blob([Buffer.from('this is not a PNG file at all')], { type: 'image/png' }), 'redis-broken.png');
  const bu = await fetch(`${baseUrl}/upload/image`, { method: 'POST', body: broken });
  ok(bu.status === 200, `upload of a broken picture: ${bu.status}`);
  const fi = await queue(tweak('image_invert', JSON.parse(fs.readFileSync(path.join(src, 'workflows', 'image_invert.json'), 'utf8')),
                               setup, 'redis-broken.png'));
  await waitHistory([fi], 'the failing prompt', 60000);
  const hf = (await history()).h[fi];
  const ef = of('execution_error', fi);
  ok(hf.status.status_str === 'error' && ef.length === 1 && ef[0].data.node_type === 'LoadImage' &&
     /redis-broken\.png/.test(ef[0].data.exception_message),
     `a run-time failure: history status error, execution_error naming LoadImage and the file (${JSON.stringify(ef[0]?.data)})`);

  // ---- the workers stopped (SIGTERM), one in the middle of a prompt, which
  // it leaves for another worker; then prompts wait in Redis across a server
  // restart
  const cut = await queue(prompt(6001, LONG_STEPS));
  await until(() => of('progress', cut).length > 0 && starts(cut).length === 1, 'a worker sampling the prompt to be cut');
  const cutWorker = starts(cut)[0].worker;
  for (const n of [cutWorker, ...[...workers.keys()].filter((k) => k !== cutWorker)])
    ok(await workers.get(n).stop() === 0, `worker ${n} stops on SIGTERM (exit 0)`);
  workers.clear();
  ok(linesAbout(cut).some((l) => l.worker === cutWorker && /left for another worker/.test(l.line)),
     `the stopped worker left its prompt for another: ${JSON.stringify(linesAbout(cut))}`);
  const later = [];
  for (let i = 0; i < 8; i++) later.push(await queue(prompt(7000 + i)));
  ws.close();
  ok(await server.stop() === 0, 'the server stops on SIGTERM (exit 0)');
  server = await startServer();
  await connect();
  const q2 = await getJson('/queue');
  ok(q2.queue_pending.map((e) => e[1]).sort().join() === [...later].sort().join() &&
     q2.queue_pending.every((e) => e.length === 5 && e[2]['3']?.class_type === 'KSampler'),
     `a new server's /queue lists the 8 waiting prompts as pending: ${JSON.stringify(q2.queue_pending.map((e) => e[1]))}`);
  ok(q2.queue_running.length === 1 && q2.queue_running[0][1] === cut,
     `and the cut one as running: ${JSON.stringify(q2.queue_running.map((e) => e[1]))}`);
  for (const n of ['w1', 'w2', 'w3']) await startWorker(n);
  await waitHistory([...later, cut], 'the prompts queued before the restart');
  const h2 = await history();
  ok(later.every((id) => h2.h[id].status.status_str === 'success' && entriesOf(h2.raw, id) === 1 && starts(id).length === 1),
     'after the restart each of them ran once, with success');
  ok(h2.h[cut].status.status_str === 'success' && entriesOf(h2.raw, cut) === 1 && starts(cut).length === 2 &&
     /attempt 2/.test(starts(cut)[1].line), `the cut prompt ran again to the end: ${JSON.stringify(linesAbout(cut))}`);
  ok(later.every((id) => of('execution_success', id).length === 1), 'the new server forwards their messages');

  // (long after: a failed prompt left pending would have been taken over)
  ok(starts(fi).length === 1 && entriesOf((await history()).raw, fi) === 1,
     `the prompt that failed ran once: ${JSON.stringify(linesAbout(fi))}`);

  // ---- nothing left behind in Redis
  await until(async () => { const qq = await getJson('/queue'); return qq.queue_running.length + qq.queue_pending.length === 0; },
              'an empty queue', 10000);
  ok(rcli('--scan', '--pattern', `${prefix}:job:*`) === '', 'no job hash left in Redis');
  ok(rcli('XLEN', `${prefix}:jobs`) === '0', `the stream is empty (XLEN ${rcli('XLEN', `${prefix}:jobs`)})`);
  ok(rcli('ZCARD', `${prefix}:queue`) === '0', 'the queue zset is empty');
} catch (e) {
  ok(false, `unexpected: ${e.stack}${e.cause ? ` (cause: ${e.cause.stack || e.cause})` : ''}`);
} finally {
  if (ws) ws.close();
  for (const [n, w] of workers) ok(await w.stop() === 0, `worker ${n} stops on SIGTERM (exit 0)`);
  if (server) ok(await server.stop() === 0, 'the server stops on SIGTERM (exit 0)');
  if (redis) await redis.stop();
  killAll();
  // (the ASan suite runs this test: a report in any log is a failure)
  const reports = [...children].filter((c) => c.name !== 'redis-server' && /ERROR: (Address|Leak)Sanitizer|runtime error:/.test(c.log()));
  ok(reports.length === 0, `sanitizer reports in ${reports.map((c) => c.logPath).join(', ')}`);
}
done();
