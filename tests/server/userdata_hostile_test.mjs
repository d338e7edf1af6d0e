// userdata_hostile_test.mjs - hostile input against the routes the web
// frontends use: path escapes in /userdata (.., absolute, encoded
// separators and NULs, links planted in the folder), oversized and
// malformed uploads (streamed: a body over the limit is refused and nothing
// is kept, a body that ends early keeps nothing), concurrent saves of one
// file (every read sees one whole version, the last one wins), concurrent
// settings posts (none lost), a settings file broken on disk, a user folder
// that survives a restart and a kill -9 in the middle of a save.
// usage: node userdata_hostile_test.mjs BIN WORKDIR MODELS_JSON
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { ok, done, startServer, until } from './lib.mjs';

const [bin, dir, modelsJson] = process.argv.slice(2);
const setup = JSON.parse(fs.readFileSync(modelsJson, 'utf8'));
const user = path.join(dir, 'user');
const args = ['--models-dir', setup.models_dir, '--tokenizer-dir', setup.tokenizer_dir, '--input-dir', path.join(dir, 'input'),
  '--output-dir', path.join(dir, 'out'), '--temp-dir', path.join(dir, 'temp'), '--user-directory', user, '--no-cache',
  '--max-body', '256K', '--max-upload-size', '1'];
let server = await startServer(bin, args, path.join(dir, 'server.log'));
let base = `http://127.0.0.1:${server.port}`;
const root = path.join(user, 'default');
const secret = path.join(dir, 'secret.txt');
fs.writeFileSync(secret, 'top secret');
const get = (p) => fetch(base + p);
const post = (p, body, headers = {}) => fetch(base + p, { method: 'POST', body, headers });
const alive = async (what) => ok((await get('/system_stats')).status === 200, `the server still answers after ${what}`);

// a raw request, for paths fetch() would normalize
function raw(reqLine, body = '') {
  return new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1');
    let data = '';
    s.on('data', (d) => { data += d; });
    s.on('end', () => resolve(Number((data.match(/^HTTP\/1\.\d (\d+)/) || [])[1] || 0)));
    s.on('error', () => resolve(0));
    s.write(`${reqLine} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  });
}

try {
  // ---- path escapes
  fs.mkdirSync(path.join(root, 'workflows'), { recursive: true });
  fs.symlinkSync(dir, path.join(root, 'workflows', 'up'));                  // a folder link leading out
  fs.symlinkSync(secret, path.join(root, 'workflows', 'secret.json'));      // a file link leading out
  const escapes = ['..%2Fsecret.txt', '..%2F..%2Fsecret.txt', '%2Fetc%2Fpasswd', 'workflows%2F..%2F..%2F..%2Fsecret.txt',
    'workflows%2Fup%2Fsecret.txt', '%2e%2e%2F%2e%2e%2Fsecret.txt', 'a%5C..%5C..%5Csecret.txt',
    'x%00.json', 'workflows%2F%2Fa.json', 'workflows%2F.%2Fa.json', 'workflows%2Fa.json%2F'];
  for (const e of escapes) {
    const r = await get(`/api/userdata/${e}`);
    const t = await r.text();
    ok(r.status >= 400 && !t.includes('top secret'), `GET /userdata/${e}: refused (${r.status})`);
    const w = await post(`/api/userdata/${e}`, 'pwned');
    ok(w.status >= 400, `POST /userdata/${e}: refused (${w.status})`);
  }
  let r = await get('/api/userdata/workflows%2Fsecret.json');
  ok(r.status === 404 && !(await r.text()).includes('top secret'), `GET of a link to a file outside: 404 (${r.status})`);
  ok(fs.readFileSync(secret, 'utf8') === 'top secret', 'nothing outside the user folder was read or written');
  for (const q of ['..', '../..', '/etc', 'workflows/up', 'workflows/../..', '%2e%2e']) {
    r = await get(`/api/userdata?dir=${encodeURIComponent(q)}`);
    ok(r.status === 403 || r.status === 404, `GET /userdata?dir=${q}: refused (${r.status})`);
  }
  r = await get('/api/userdata?dir=workflows&recurse=true');
  const listed = await r.json();
  ok(r.status === 200 && !listed.some((f) => f.includes('secret') || f.includes('up/')), `links are not listed (${JSON.stringify(listed)})`);
  r = await get('/api/v2/userdata?path=..');
  ok(r.status === 400, `/v2/userdata?path=..: 400 (${r.status})`);
  r = await post('/api/userdata/workflows%2Fsecret.json/move/workflows%2Fmine.json', '');
  ok(r.status === 404 && fs.readFileSync(secret, 'utf8') === 'top secret', `moving a link: 404 (${r.status})`);
  r = await post('/api/userdata/workflows%2Fa.json?overwrite=true', '{}');
  r = await post('/api/userdata/workflows%2Fa.json/move/..%2F..%2Fmoved.json', '');
  ok(r.status === 403 && !fs.existsSync(path.join(user, 'moved.json')) && !fs.existsSync(path.join(dir, 'moved.json')),
     `moving out of the folder: 403 (${r.status})`);
  r = await post('/api/userdata/workflows%2Fsecret.json?overwrite=true', 'replaced');
  ok(r.status === 200 && fs.readFileSync(secret, 'utf8') === 'top secret' && !fs.lstatSync(path.join(root, 'workflows', 'secret.json')).isSymbolicLink(),
     `saving over a link replaces the link, never writes its target (${r.status})`);
  fs.rmSync(path.join(root, 'workflows', 'secret.json'));
  fs.symlinkSync(secret, path.join(root, 'workflows', 'secret.json'));
  r = await fetch(`${base}/api/userdata/workflows%2Fsecret.json`, { method: 'DELETE' });
  ok(fs.readFileSync(secret, 'utf8') === 'top secret', `DELETE of a link leaves its target (${r.status})`);
  ok((await raw('GET /api/userdata/%2e%2e/%2e%2e/secret.txt')) >= 400, 'a raw encoded ../.. path: refused');
  ok((await raw('GET /../../secret.txt')) !== 200, 'a raw ../ request line: not served');
  await alive('path escapes');

  // ---- limits
  r = await post('/api/userdata/workflows%2Fbig.json', 'x'.repeat(300 * 1024));
  ok(r.status === 413 && !fs.existsSync(path.join(root, 'workflows', 'big.json')), `a file over --max-body: 413, not kept (${r.status})`);
  r = await post('/api/userdata/' + 'a'.repeat(300) + '.json', '{}');
  ok(r.status === 403, `a name over 255 bytes: 403 (${r.status})`);
  r = await post('/api/userdata/' + Array(40).fill('d').join('%2F') + '.json', '{}');
  ok(r.status === 403, `a path over 32 levels: 403 (${r.status})`);

  // ---- uploads: over the limit, ending early, malformed
  const bigImg = Buffer.alloc(1536 * 1024, 7);
  let fd = new FormData();
  fd.append('image', new Blob([bigImg]), 'too-big.png');
  r = await fetch(`${base}/upload/image`, { method: 'POST', body: fd });
  ok(r.status === 413 && !fs.existsSync(path.join(dir, 'input', 'too-big.png')), `an upload over --max-upload-size 1: 413 (${r.status})`);
  const leftovers = () => (fs.existsSync(path.join(dir, 'input')) ? fs.readdirSync(path.join(dir, 'input')) : []).filter((f) => f.startsWith('.sdflow-tmp'));
  ok(leftovers().length === 0, 'no temporary left by the refused upload');
  // a chunked body without Content-Length, over the limit: counted as it streams
  const chunked = await new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1');
    let data = '';
    s.on('data', (d) => { data += d; });
    s.on('end', () => resolve(data));
    s.on('error', () => resolve(data));
    const b = '----x';
    s.write(`POST /upload/image HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=${b}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n`);
    const head = `--${b}\r\nContent-Disposition: form-data; name="image"; filename="chunked.png"\r\n\r\n`;
    s.write(`${Buffer.byteLength(head).toString(16)}\r\n${head}\r\n`);
    const piece = Buffer.alloc(64 * 1024, 1);
    for (let i = 0; i < 40; i++) s.write(Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]));
    const tail = `\r\n--${b}--\r\n`;
    s.write(`${Buffer.byteLength(tail).toString(16)}\r\n${tail}\r\n0\r\n\r\n`);
  });
  ok(/^HTTP\/1\.\d 413/.test(chunked) && !fs.existsSync(path.join(dir, 'input', 'chunked.png')), `a chunked upload over the limit: 413 (${chunked.slice(0, 20)})`);
  // a body that stops in the middle of the file
  await new Promise((resolve) => {
    const s = net.connect(server.port, '127.0.0.1');
    const b = '----y';
    const head = `--${b}\r\nContent-Disposition: form-data; name="image"; filename="cut.png"\r\n\r\n`;
    s.write(`POST /upload/image HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=${b}\r\nContent-Length: ${head.length + 100000}\r\n\r\n${head}`);
    s.write(Buffer.alloc(30000, 2));
    setTimeout(() => { s.destroy(); resolve(); }, 300);
  });
  await until(() => leftovers().length === 0, 'the cut upload\'s temporary to go', 30000).catch(() => {});
  ok(!fs.existsSync(path.join(dir, 'input', 'cut.png')) && leftovers().length === 0, 'an upload cut short keeps nothing');
  for (const [what, body, ctype] of [
    ['no boundary', 'abc', 'multipart/form-data'],
    ['no closing boundary', '--q\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n\r\nabc', 'multipart/form-data; boundary=q'],
    ['a NUL in a field', '--q\r\nContent-Disposition: form-data; name="subfolder"\r\n\r\na\0b\r\n--q\r\nContent-Disposition: form-data; name="image"; filename="n.png"\r\n\r\nabc\r\n--q--\r\n', 'multipart/form-data; boundary=q'],
    ['a field over its size', `--q\r\nContent-Disposition: form-data; name="subfolder"\r\n\r\n${'s'.repeat(5000)}\r\n--q\r\nContent-Disposition: form-data; name="image"; filename="n.png"\r\n\r\nabc\r\n--q--\r\n`, 'multipart/form-data; boundary=q'],
  ]) {
    r = await post('/upload/image', body, { 'Content-Type': ctype });
    ok(r.status === 400, `upload with ${what}: 400 (${r.status})`);
  }
  fd = new FormData();
  fd.append('image', new Blob([Buffer.from('not a png')]), 'mask.png');
  fd.append('original_ref', JSON.stringify({ filename: '../../secret.txt', type: 'input' }));
  r = await fetch(`${base}/upload/mask`, { method: 'POST', body: fd });
  ok(r.status === 400, `/upload/mask naming ../../secret.txt: 400 (${r.status})`);
  fd = new FormData();
  fd.append('image', new Blob([Buffer.from('not a png')]), 'mask.png');
  fd.append('original_ref', '{not json');
  r = await fetch(`${base}/upload/mask`, { method: 'POST', body: fd });
  ok(r.status === 400, `/upload/mask with broken original_ref: 400 (${r.status})`);
  // a link in the input folder with the upload's name and bytes: never read through
  fs.mkdirSync(path.join(dir, 'input'), { recursive: true });
  fs.symlinkSync(secret, path.join(dir, 'input', 'same.txt'));
  fd = new FormData();
  fd.append('image', new Blob([Buffer.from('top secret')]), 'same.txt');
  r = await fetch(`${base}/upload/image`, { method: 'POST', body: fd });
  const sb = await r.json();
  ok(r.status === 200 && sb.name === 'same (1).txt', `de-duplication does not read a link's target (${JSON.stringify(sb)})`);
  fd = new FormData();
  fd.append('image', new Blob([Buffer.from('overwritten')]), 'same.txt');
  fd.append('overwrite', 'true');
  r = await fetch(`${base}/upload/image`, { method: 'POST', body: fd });
  ok(r.status === 200 && fs.readFileSync(secret, 'utf8') === 'top secret' && !fs.lstatSync(path.join(dir, 'input', 'same.txt')).isSymbolicLink(),
     'overwrite replaces a link, never writes its target');
  await alive('hostile uploads');

  // ---- concurrent saves of one file: whole versions only, the last one wins
  const version = (i) => JSON.stringify({ version: i, pad: String(i).repeat(20000) });
  const reads = [];
  const writers = [];
  // (12 + 12 connections: under the server's 32 per client address)
  for (let i = 0; i < 12; i++) writers.push(post('/api/userdata/workflows%2Frace.json?overwrite=true', version(i)));
  for (let i = 0; i < 12; i++) reads.push(get('/api/userdata/workflows%2Frace.json').then(async (x) => (x.status === 200 ? x.text() : null)));
  const ws = await Promise.all(writers);
  const rs = (await Promise.all(reads)).filter((x) => x !== null);
  ok(ws.every((x) => x.status === 200), `12 concurrent saves answer 200 (${ws.map((x) => x.status)})`);
  ok(rs.every((t) => { try { const j = JSON.parse(t); return t === version(j.version); } catch { return false; } }),
     `every concurrent read sees one whole version (${rs.length} reads)`);
  const fin = JSON.parse(fs.readFileSync(path.join(root, 'workflows', 'race.json'), 'utf8'));
  ok(typeof fin.version === 'number' && fs.readFileSync(path.join(root, 'workflows', 'race.json'), 'utf8') === version(fin.version), 'the file on disk is one whole version');
  ok(fs.readdirSync(path.join(root, 'workflows')).every((f) => !f.startsWith('.sdflow-tmp')), 'no temporaries left');
  // creators racing with overwrite=false: exactly one wins
  const cr = await Promise.all(Array.from({ length: 12 }, (_, i) => post('/api/userdata/workflows%2Fonce.json?overwrite=false', `{"who": ${i}}`)));
  ok(cr.filter((x) => x.status === 200).length === 1 && cr.filter((x) => x.status === 409).length === 11,
     `12 racing creators: one 200, eleven 409 (${cr.map((x) => x.status)})`);
  // concurrent settings: none lost
  await Promise.all(Array.from({ length: 16 }, (_, i) => post(`/api/settings/Race.S${i}`, JSON.stringify(i))));
  const st = await (await get('/api/settings')).json();
  ok(Array.from({ length: 16 }, (_, i) => st[`Race.S${i}`] === i).every(Boolean), `16 settings posted at once all stay (${Object.keys(st).length} keys)`);
  r = await post('/api/settings', '[1,2]');
  ok(r.status === 400, `POST /settings with a non-object: 400 (${r.status})`);
  r = await post('/api/settings', '{"a": ');
  ok(r.status === 400, `POST /settings with broken JSON: 400 (${r.status})`);

  // ---- kill -9 in the middle of a save, a broken settings file, a restart
  await post('/api/userdata/workflows%2Fkept.json?overwrite=true', version(1));
  const slow = net.connect(server.port, '127.0.0.1');
  const body = version(2);
  slow.write(`POST /api/userdata/workflows%2Fkept.json?overwrite=true HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5000)}`);
  await new Promise((res) => setTimeout(res, 300));
  server.proc.kill('SIGKILL');
  await new Promise((res) => server.proc.once('exit', res));
  slow.destroy();
  ok(fs.readFileSync(path.join(root, 'workflows', 'kept.json'), 'utf8') === version(1), 'after kill -9 mid-save the file is the old whole version');
  fs.writeFileSync(path.join(root, 'comfy.settings.json'), '{"broken": ');
  server = await startServer(bin, args, path.join(dir, 'server2.log'));
  base = `http://127.0.0.1:${server.port}`;
  r = await get('/api/userdata/workflows%2Frace.json');
  ok(r.status === 200 && (await r.text()) === version(fin.version), 'a saved file survives a restart');
  r = await get('/api/settings');
  ok(r.status === 200 && JSON.stringify(await r.json()) === '{}', 'a broken settings file reads as {} (ComfyUI)');
  r = await post('/api/settings/Comfy.Fixed', '"yes"');
  ok(r.status === 200 && (await (await get('/api/settings/Comfy.Fixed')).json()) === 'yes', 'and can be written again');
  await alive('the restart');
} catch (e) {
  ok(false, `unexpected: ${e.stack}`);
} finally {
  if (server.proc.exitCode === null) ok((await server.stop()) === 0, 'the server stops cleanly');
}
done();
