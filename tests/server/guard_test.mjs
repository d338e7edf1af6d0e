// guard_test.mjs - who may talk to `sdflow serve` (docs/server.md, "Threat
// model"), as a hostile web page, a DNS-rebinding page and slow clients
// would try it:
//   - without a token, a request whose Origin is not the server's own (a
//     cross-origin text/plain POST /prompt, a CORS preflight, a WebSocket
//     from a foreign page, Sec-Fetch-Site: cross-site) is refused 403 and
//     nothing runs; a Host header that is not a loopback name (DNS
//     rebinding) is refused 403; same-origin requests and clients that send
//     no Origin (curl, scripts) are served;
//   - --enable-cors-header opens it deliberately: with no value any origin
//     (and CORS headers on every reply), with an ORIGIN only that one;
//   - with --token the token is what protects (any origin that has it);
//   - --listen 0.0.0.0 --insecure accepts any Host name (other machines
//     reach it under names this one cannot know);
//   - a NUL in a query value (?filename=ok.txt%00.png, ?token=T%00junk) is
//     refused, not cut short;
//   - slow clients: 80 connections from one address that trickle their
//     headers do not keep another address from being served; connections
//     beyond --max-client-connections are refused at once (503), and one
//     that has not finished its headers within --request-timeout is closed.
// usage: node guard_test.mjs BIN WORKDIR MODELS_JSON
import WebSocket from 'ws';
import http from 'node:http';
import net from 'node:net';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { ok, done, until, startServer } from './lib.mjs';

const [bin, dir, modelsJson] = process.argv.slice(2);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
for (const d of ['input', 'out', 'temp']) fs.mkdirSync(path.join(dir, d), { recursive: true });
fs.writeFileSync(path.join(dir, 'out', 'ok.txt'), 'ok');
spawnSync('mkfifo', [path.join(dir, 'out', 'pipe.png')]);
const common = ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir, '--input-dir', path.join(dir, 'input'),
                '--output-dir', path.join(dir, 'out'), '--temp-dir', path.join(dir, 'temp'), '--no-cache'];

// One HTTP request with exactly these headers (node's http sets Host only
// when not given); resolves {status, headers, body}.
function request(port, method, p, headers = {}, body = null, localAddress = undefined) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers, localAddress, agent: false }, (res) => {
      let text = '';
      res.on('error', (e) => resolve({ status: `error ${e.message}`, headers: {}, body: '' }));
      res.on('aborted', () => resolve({ status: 'error aborted', headers: {}, body: '' }));
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: text }));
    });
    req.on('error', (e) => resolve({ status: `error ${e.message}`, headers: {}, body: '' }));
    if (body) req.end(body); else req.end();
  });
}

// A WebSocket handshake with the given Origin: resolves 'open' or the
// refusal ('unexpected-response NNN' / an error message).
function wsTry(port, origin, query = '') {
  return new Promise((resolve) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/ws${query}`, origin ? { origin } : {});
    ws.on('open', () => { ws.close(); resolve('open'); });
    ws.on('unexpected-response', (req, res) => { resolve(`unexpected-response ${res.statusCode}`); req.destroy(); });
    ws.on('error', (e) => resolve(`error ${e.message}`));
  });
}

const tinyPrompt = () => JSON.stringify({ prompt: { '1': { class_type: 'EmptyImage', inputs: { width: 8, height: 8, batch_size: 1, color: 0 } },
                                                    '2': { class_type: 'PreviewImage', inputs: { images: ['1', 0] } } } });
const historyCount = async (port) => Object.keys(JSON.parse((await request(port, 'GET', '/history')).body || '{}')).length;

try {
  // ---- no token: same origin only, loopback Host names only ---------------------------------
  let s = await startServer(bin, common, path.join(dir, 'plain.log'));
  let p = s.port;
  const self = `http://127.0.0.1:${p}`;
  let r = await request(p, 'POST', '/prompt', { Origin: 'http://evil.example', 'Content-Type': 'text/plain' }, tinyPrompt());
  ok(r.status === 403, `cross-origin text/plain POST /prompt: 403 (${r.status} ${r.body.slice(0, 80)})`);
  r = await request(p, 'POST', '/prompt', { Origin: 'http://127.0.0.1:1', 'Content-Type': 'text/plain' }, tinyPrompt());
  ok(r.status === 403, `POST /prompt from another port of this host: 403 (${r.status})`);
  r = await request(p, 'POST', '/prompt', { Origin: 'null', 'Content-Type': 'text/plain' }, tinyPrompt());
  ok(r.status === 403, `POST /prompt with Origin: null (a sandboxed page): 403 (${r.status})`);
  r = await request(p, 'POST', '/prompt', { 'Sec-Fetch-Site': 'cross-site', 'Content-Type': 'text/plain' }, tinyPrompt());
  ok(r.status === 403, `POST /prompt marked Sec-Fetch-Site: cross-site (no Origin): 403 (${r.status})`);
  r = await request(p, 'OPTIONS', '/prompt', { Origin: 'http://evil.example', 'Access-Control-Request-Method': 'POST',
                                             'Access-Control-Request-Headers': 'content-type' });
  ok(r.status === 403 && !r.headers['access-control-allow-origin'],
     `CORS preflight from a foreign page: 403 without Access-Control-Allow-Origin (${r.status} ${r.headers['access-control-allow-origin']})`);
  ok((await wsTry(p, 'http://evil.example')) !== 'open', 'a WebSocket from a foreign Origin is refused');
  r = await request(p, 'GET', '/system_stats', { Host: `evil.example:${p}` });
  ok(r.status === 403, `Host: evil.example (DNS rebinding): 403 (${r.status})`);
  r = await request(p, 'GET', '/system_stats', { Host: `evil.example:${p}`, Origin: `http://evil.example:${p}` });
  ok(r.status === 403, `a rebound page, same origin as its own Host: 403 (${r.status})`);
  r = await request(p, 'GET', '/system_stats', { Host: `127.0.0.1.evil.example:${p}` });
  ok(r.status === 403, `Host: 127.0.0.1.evil.example: 403 (${r.status})`);
  ok((await historyCount(p)) === 0, 'no refused prompt ran');
  // what must still work
  r = await request(p, 'POST', '/prompt', { Origin: self, 'Content-Type': 'application/json' }, tinyPrompt());
  ok(r.status === 200, `same-origin POST /prompt: 200 (${r.status} ${r.body.slice(0, 120)})`);
  r = await request(p, 'POST', '/prompt', { 'Content-Type': 'application/json' }, tinyPrompt());
  ok(r.status === 200, `POST /prompt without Origin (curl, scripts): 200 (${r.status})`);
  r = await request(p, 'POST', '/prompt', { Origin: `http://localhost:${p}`, Host: `localhost:${p}` }, tinyPrompt());
  ok(r.status === 200, `same origin under the name localhost: 200 (${r.status})`);
  r = await request(p, 'GET', '/', { 'Sec-Fetch-Site': 'cross-site', 'Sec-Fetch-Mode': 'navigate' });
  ok(r.status === 200, `following a link to the page from another site: 200 (${r.status})`);
  for (const h of [`localhost:${p}`, `127.0.0.1:${p}`, `[::1]:${p}`, `127.0.0.5`, `app.localhost:${p}`]) {
    r = await request(p, 'GET', '/system_stats', { Host: h });
    ok(r.status === 200, `Host: ${h}: 200 (${r.status})`);
  }
  ok((await wsTry(p, self)) === 'open', 'a same-origin WebSocket opens');
  ok((await wsTry(p, null)) === 'open', 'a WebSocket without Origin (a script) opens');
  await until(async () => (await historyCount(p)) === 3, 'the three accepted prompts to finish');
  ok(!s.log().includes('Access-Control-Allow-Origin'), 'no CORS header is mentioned');
  // prompt_id: kept as ComfyUI keeps it (str(...)), or refused; never replaced
  const withId = (id) => JSON.stringify({ ...JSON.parse(tinyPrompt()), prompt_id: id });
  for (const [id, want] of [['my-id-1', 'my-id-1'], [42, '42'], [null, null]]) {
    r = await request(p, 'POST', '/prompt', { 'Content-Type': 'application/json' }, withId(id));
    const got = r.status === 200 ? JSON.parse(r.body).prompt_id : null;
    ok(r.status === 200 && (want === null ? /^[0-9a-f-]{36}$/.test(got) : got === want),
       `prompt_id ${JSON.stringify(id)}: kept as ${JSON.stringify(want)} (${r.status} ${got})`);
  }
  r = await request(p, 'POST', '/prompt', { 'Content-Type': 'application/json' },
                    JSON.stringify({ ...JSON.parse(tinyPrompt()), prompt_id: 12345678901234567890 }).replace('12345678901234567000', '12345678901234567890'));
  ok(r.status === 200 && JSON.parse(r.body).prompt_id === '12345678901234567890', `a prompt_id beyond 2^53 keeps its digits (${r.status} ${r.body.slice(0, 80)})`);
  for (const id of ['x'.repeat(100), '', 1.5, true, { a: 1 }, 'a\nb']) {
    r = await request(p, 'POST', '/prompt', { 'Content-Type': 'application/json' }, withId(id));
    ok(r.status === 400 && r.body.includes('prompt_id'), `prompt_id ${JSON.stringify(id).slice(0, 20)}: refused 400 (${r.status} ${r.body.slice(0, 80)})`);
  }
  await until(async () => (await historyCount(p)) === 7, 'the prompts with kept ids to finish');
  // NUL in a query value: refused, never cut short
  r = await request(p, 'GET', '/view?filename=ok.txt');
  ok(r.status === 200 && r.body === 'ok', `/view?filename=ok.txt serves it (${r.status})`);
  r = await request(p, 'GET', '/view?filename=ok.txt%00.png');
  ok(r.status === 400, `/view?filename=ok.txt%00.png: 400, not ok.txt (${r.status} ${r.body.slice(0, 40)})`);
  r = await request(p, 'GET', '/view?filename=ok.txt&subfolder=%00');
  ok(r.status === 400, `a NUL in another query value: 400 (${r.status})`);
  // a FIFO in a served folder: 60 requests for it (10 at a time, within
  // the per-address limit) are answered (not a regular file: 404) instead
  // of each holding a thread in open() forever
  ok(fs.statSync(path.join(dir, 'out', 'pipe.png')).isFIFO(), 'the test made a FIFO');
  let answered = 0, notFound = 0;
  const fifo = (async () => {
    for (let b = 0; b < 6; b++)
      await Promise.all(Array.from({ length: 10 }, () => request(p, 'GET', '/view?filename=pipe.png').then((x) => {
        answered++;
        if (x.status === 404) notFound++;
      })));
  })();
  await until(async () => answered === 60, '60 /view requests for a FIFO to be answered', 120000)
    .then(() => ok(notFound === 60, `/view of a FIFO: 404, 60 times (${notFound})`), (e) => ok(false, e.message));
  r = await request(p, 'GET', '/system_stats');
  ok(r.status === 200, `the server still serves after /view of a FIFO (${r.status})`);
  if (answered < 60) { await s.stop(); done(); }
  await fifo;
  await s.stop();

  // ---- --enable-cors-header: opened deliberately -------------------------------------------
  s = await startServer(bin, [...common, '--enable-cors-header'], path.join(dir, 'cors_any.log'));
  p = s.port;
  r = await request(p, 'OPTIONS', '/prompt', { Origin: 'http://other.example', 'Access-Control-Request-Method': 'POST' });
  ok(r.status === 200 && r.headers['access-control-allow-origin'] === '*',
     `--enable-cors-header: preflight 200 with Access-Control-Allow-Origin * (${r.status} ${r.headers['access-control-allow-origin']})`);
  r = await request(p, 'POST', '/prompt', { Origin: 'http://other.example', 'Content-Type': 'application/json' }, tinyPrompt());
  ok(r.status === 200 && r.headers['access-control-allow-origin'] === '*', `--enable-cors-header: cross-origin POST served with CORS headers (${r.status})`);
  ok((await wsTry(p, 'http://other.example')) === 'open', '--enable-cors-header: a foreign WebSocket opens');
  r = await request(p, 'GET', '/system_stats', { Host: `evil.example:${p}` });
  ok(r.status === 403, `--enable-cors-header does not open the Host check: 403 (${r.status})`);
  await s.stop();
  s = await startServer(bin, [...common, '--enable-cors-header', 'http://app.example:3000'], path.join(dir, 'cors_one.log'));
  p = s.port;
  r = await request(p, 'POST', '/prompt', { Origin: 'http://app.example:3000', 'Content-Type': 'application/json' }, tinyPrompt());
  ok(r.status === 200 && r.headers['access-control-allow-origin'] === 'http://app.example:3000',
     `--enable-cors-header ORIGIN: that origin is served, named in the header (${r.status} ${r.headers['access-control-allow-origin']})`);
  r = await request(p, 'POST', '/prompt', { Origin: 'http://evil.example', 'Content-Type': 'text/plain' }, tinyPrompt());
  ok(r.status === 403, `--enable-cors-header ORIGIN: another origin is still refused (${r.status})`);
  await s.stop();

  // ---- --token: the token is the protection --------------------------------------------------
  const token = 'guard-test-token-123';
  s = await startServer(bin, [...common, '--token', token], path.join(dir, 'token.log'));
  p = s.port;
  r = await request(p, 'GET', '/system_stats', { Origin: 'http://evil.example' });
  ok(r.status === 401, `--token, no token, foreign origin: 401 (${r.status})`);
  r = await request(p, 'GET', '/system_stats', { Origin: 'http://evil.example', Authorization: `Bearer ${token}` });
  ok(r.status === 200, `--token: a client with the token is served whatever its Origin (${r.status})`);
  r = await request(p, 'GET', `/system_stats?token=${token}%00junk`);
  ok(r.status === 400 || r.status === 401, `?token=TOKEN%00junk is not accepted (${r.status})`);
  r = await request(p, 'GET', `/system_stats?token=${token}`);
  ok(r.status === 200, `?token=TOKEN is (${r.status})`);

  // ---- slow clients ----------------------------------------------------------------------
  // 80 connections from 127.0.0.2 send their request line and then one
  // header byte every 0.5 s; a client at 127.0.0.1 must still be answered
  // while they trickle (before: it waited until they timed out, 30 s).
  await s.stop();
  s = await startServer(bin, [...common, '--token', token, '--request-timeout', '300', '--max-client-connections', '16'],
                        path.join(dir, 'slow.log'));
  p = s.port;
  const slow = [];
  let refused = 0, closed = 0;
  for (let i = 0; i < 80; i++) {
    const sock = net.connect({ port: p, host: '127.0.0.1', localAddress: '127.0.0.2' });
    sock.on('error', () => {});
    sock.on('data', (d) => { if (/^HTTP\/1\.[01] 503/.test(d.toString('latin1'))) refused++; });
    sock.on('close', () => closed++);
    sock.on('connect', () => sock.write('GET /system_stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: '));
    slow.push(sock);
  }
  const drip = setInterval(() => { for (const k of slow) if (!k.destroyed) k.write('a'); }, 500);
  await until(async () => refused + closed >= 80 - 16, 'the connections over the per-address limit to be refused', 60000);
  ok(refused >= 80 - 16, `connections beyond --max-client-connections (16) from one address: refused with 503 (${refused})`);
  r = await request(p, 'GET', '/system_stats', { Authorization: `Bearer ${token}` });
  const stillOpen = slow.filter((k) => !k.destroyed && !k.readableEnded).length;
  ok(r.status === 200, `another address is served while 80 slow connections trickle (${r.status})`);
  ok(stillOpen >= 1, `...while the admitted slow ones still trickle (${stillOpen} open): it did not wait for them to time out`);
  clearInterval(drip);
  for (const k of slow) k.destroy();
  await s.stop();
  // the time to the end of the headers is bounded: a trickler is closed
  s = await startServer(bin, [...common, '--request-timeout', '1'], path.join(dir, 'deadline.log'));
  p = s.port;
  const t = net.connect({ port: p, host: '127.0.0.1' });
  let tclosed = false;
  t.on('error', () => {});
  t.on('close', () => (tclosed = true));
  t.on('connect', () => t.write('GET /system_stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: '));
  const drip2 = setInterval(() => { if (!t.destroyed) t.write('a'); }, 200);
  await until(async () => tclosed, 'a connection that never ends its headers to be closed (--request-timeout 1)', 120000)
    .then(() => ok(true, ''), (e) => ok(false, e.message));
  clearInterval(drip2);
  r = await request(p, 'GET', '/system_stats');
  ok(r.status === 200, `and the server goes on serving (${r.status})`);
  await s.stop();

  // ---- --listen 0.0.0.0 --insecure: any Host name ---------------------------------------------
  s = await startServer(bin, [...common, '--listen', '0.0.0.0', '--insecure'], path.join(dir, 'any.log'));
  p = s.port;
  r = await request(p, 'GET', '/system_stats', { Host: `gpu-box.lan:${p}` });
  ok(r.status === 200, `--listen 0.0.0.0: Host gpu-box.lan accepted (${r.status})`);
  r = await request(p, 'POST', '/prompt', { Host: `gpu-box.lan:${p}`, Origin: 'http://evil.example', 'Content-Type': 'text/plain' }, tinyPrompt());
  ok(r.status === 403, `--listen 0.0.0.0 without a token: a foreign Origin is still refused (${r.status})`);
  await s.stop();
} catch (e) {
  ok(false, `exception: ${e.stack || e}`);
}
done();
