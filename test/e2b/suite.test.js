// The stock E2B SDKs (e2b, @e2b/code-interpreter, pinned in package.json),
// unmodified, against a real corral serve. The SDKs are configured by the
// environment alone, as a user would: E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY. The suite also reads CORRAL_E2B_KEY_OTHER (a key of another
// tenant), CORRAL_E2B_TEMPLATE (the template its sandboxes are made from;
// code-interpreter-v1 if unset) and CORRAL_E2B_TIER (the tier the server
// puts E2B sandboxes on, checked if set). e2b_sandbox_test.go starts the server and runs it:
//   node --test test/e2b/suite.test.js
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { Sandbox } from '@e2b/code-interpreter'
import { CommandExitError, NotFoundError, SandboxError, TimeoutError, Sandbox as BaseSandbox } from 'e2b'

const env = (name) => {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is not set`)
  return v
}
const sandboxURL = env('E2B_SANDBOX_URL')
const apiURL = env('E2B_API_URL')
const otherKey = env('CORRAL_E2B_KEY_OTHER')
const template = process.env.CORRAL_E2B_TEMPLATE || 'code-interpreter-v1'
// Tags this run's sandboxes, for the listing by metadata.
const run = `run-${process.pid}-${Date.now()}`

// until polls cond (an async predicate) until it holds, for at most ms.
async function until(what, cond, ms = 20_000) {
  const deadline = Date.now() + ms
  for (;;) {
    if (await cond()) return
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

let sbx
before(async () => {
  sbx = await Sandbox.create(template, { timeoutMs: 600_000, metadata: { suite: run, role: 'main' } })
})
after(async () => {
  await sbx?.kill()
})

test('the sandbox is on the tier the server makes E2B sandboxes on', async (t) => {
  const tier = process.env.CORRAL_E2B_TIER
  if (!tier) return t.skip('CORRAL_E2B_TIER is not set')
  // runc's sandbox shares the host's kernel; gVisor's is its own.
  const host = readFileSync('/proc/version', 'utf8')
  const r = await sbx.commands.run('cat /proc/version')
  assert.equal(r.stdout === host, tier === 'container', `sandbox: ${r.stdout}host: ${host}`)
})

test('runCode keeps state between cells', async () => {
  const first = await sbx.runCode('x = 1')
  assert.equal(first.error, undefined)
  const ex = await sbx.runCode('x + 1')
  assert.equal(ex.text, '2')
  assert.equal(ex.error, undefined)
  assert.ok(ex.executionCount >= 2, `executionCount ${ex.executionCount}`)
})

test('runCode streams stdout and stderr to the callbacks and the logs', async () => {
  const out = []
  const err = []
  const ex = await sbx.runCode("import sys\nprint('hello')\nprint('oops', file=sys.stderr)", {
    onStdout: (m) => out.push(m.line),
    onStderr: (m) => err.push(m.line),
  })
  assert.deepEqual(out, ['hello\n'])
  assert.deepEqual(err, ['oops\n'])
  assert.deepEqual(ex.logs.stdout, ['hello\n'])
  assert.deepEqual(ex.logs.stderr, ['oops\n'])
})

test('a DataFrame gives html', async () => {
  const ex = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
  assert.equal(ex.error, undefined)
  const main = ex.results.find((r) => r.isMainResult)
  assert.ok(main, 'no main result')
  assert.match(main.html, /<table/)
  assert.match(main.text, /a\s+b/)
  assert.ok(main.formats().includes('html'))
})

test('a matplotlib figure gives png', async () => {
  const ex = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
  assert.equal(ex.error, undefined)
  const fig = ex.results.find((r) => r.png)
  assert.ok(fig, `no png among ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
  const png = Buffer.from(fig.png, 'base64')
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
})

test('an exception gives error name, value and traceback', async () => {
  const ex = await sbx.runCode('def f():\n    return 1 / 0\nf()')
  assert.ok(ex.error, 'no error')
  assert.equal(ex.error.name, 'ZeroDivisionError')
  assert.equal(ex.error.value, 'division by zero')
  assert.equal(typeof ex.error.traceback, 'string')
  assert.match(ex.error.traceback, /ZeroDivisionError/)
  assert.match(ex.error.traceback, /1 \/ 0/)
  assert.equal(ex.text, undefined)
})

test('code contexts: apart, restarted, removed', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python' })
  assert.equal(ctx.language, 'python')
  assert.ok(ctx.id)
  await sbx.runCode('y = 5', { context: ctx })
  assert.equal((await sbx.runCode('y * 2', { context: ctx })).text, '10')
  assert.equal((await sbx.runCode('y')).error?.name, 'NameError', 'the default context sees y')
  const list = await sbx.listCodeContexts()
  assert.ok(list.some((c) => c.id === ctx.id), `list ${JSON.stringify(list)}`)
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('y', { context: ctx })).error?.name, 'NameError', 'y survived a restart')
  await sbx.removeCodeContext(ctx.id)
  await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
})

test('a context whose cwd is over PATH_MAX or NAME_MAX is refused (400); the sandbox lives on', async () => {
  await sbx.runCode('z = 7')
  const h = { 'Content-Type': 'application/json' }
  for (const cwd of ['/' + 'a'.repeat(5000), '/' + 'a'.repeat(1 << 20), '/workspace/' + 'n'.repeat(256)]) {
    const res = await sandboxFetch('/contexts', 49999, sbx.envdAccessToken, {
      method: 'POST', headers: h, body: JSON.stringify({ language: 'python', cwd }),
    })
    assert.equal(res.status, 400, `cwd of ${cwd.length} bytes: ${res.status}`)
    const e = await res.json()
    assert.equal(e.code, 400)
    assert.match(e.message, /cwd/)
  }
  assert.equal((await sbx.runCode('z + 1')).text, '8', 'the default context kept its state')
})

test('runCode in bash and javascript', async () => {
  const sh = await sbx.runCode('cd /tmp && v=7', { language: 'bash' })
  assert.equal(sh.error, undefined)
  // The bash context keeps its directory and variables.
  const again = await sbx.runCode('echo "$v in $PWD"', { language: 'bash' })
  assert.deepEqual(again.logs.stdout, ['7 in /tmp\n'])
  // The code interpreter's template has node, as E2B's does.
  const js = await sbx.runCode('[1, 2, 3].map((x) => x * 2).join(",")', { language: 'javascript' })
  assert.equal(js.error, undefined)
  assert.match(js.text ?? js.logs.stdout.join(''), /2,4,6/)
  // typescript is not one of Corral's languages: refused, not lost.
  await assert.rejects(sbx.runCode('1 + 1', { language: 'typescript' }), (e) =>
    e instanceof SandboxError && !(e instanceof NotFoundError) && /^400 /.test(e.message))
})

test('runCode past its timeoutMs throws TimeoutError; the context goes on', async () => {
  await assert.rejects(sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 1500 }), TimeoutError)
  // The cell was interrupted when the SDK hung up: the next runs at once.
  const ex = await sbx.runCode('x + 1', { timeoutMs: 30_000 })
  assert.equal(ex.text, '2')
})

test('commands.run gives stdout, stderr and the exit code', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
  const e = await sbx.commands.run('pwd; echo "$FOO"', { cwd: '/tmp', envs: { FOO: 'bar' } })
  assert.equal(e.stdout, '/tmp\nbar\n')
})

test('commands.run throws CommandExitError on a non-zero exit', async () => {
  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    return true
  })
})

test('commands.run in the background, listed, then killed', async () => {
  const h = await sbx.commands.run('sleep 600', { background: true })
  assert.ok(h.pid > 0)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), 'not listed')
  assert.equal(await h.kill(), true)
  await assert.rejects(h.wait(), CommandExitError)
  await until('the killed command to leave the list', async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid))
})

test('a machine of its own: user, home, relative paths, root on request', async () => {
  const who = await sbx.commands.run('whoami; echo "$HOME"; pwd; id -u')
  assert.equal(who.stdout, 'user\n/home/user\n/home/user\n1000\n')
  await sbx.files.write('notes.txt', 'relative\n')
  assert.equal(await sbx.files.read('/home/user/notes.txt'), 'relative\n')
  assert.equal((await sbx.commands.run('cat notes.txt; stat -c %U notes.txt')).stdout, 'relative\nuser\n')
  assert.equal((await sbx.commands.run('cat ../user/notes.txt', { cwd: '.' })).stdout, 'relative\n')
  assert.equal((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n')
  assert.equal((await sbx.commands.run('whoami; echo "$HOME"', { user: 'root' })).stdout, 'root\n/root\n')
  await assert.rejects(sbx.commands.run('touch /usr/local/bin/x'), CommandExitError)
  await sbx.commands.run('touch /usr/local/bin/x && rm /usr/local/bin/x', { user: 'root' })
  // What root owns outside its sandbox: nothing (its uid is the sandbox's own).
  assert.equal((await sbx.commands.run('ls -ld /home/user | cut -d" " -f3', { user: 'root' })).stdout, 'user\n')
})

test('as root, a local .deb, wheel and npm tarball install; user runs them', async () => {
  // Made in the sandbox, by the user: no test may need the network.
  await sbx.commands.run(`set -e
d=$(mktemp -d); mkdir -p $d/DEBIAN $d/usr/local/bin
printf 'Package: corral-hello\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: Corral <test@example.com>\\nDescription: a test package\\n' > $d/DEBIAN/control
printf '#!/bin/sh\\necho hello from a deb\\n' > $d/usr/local/bin/corral-hello-deb; chmod 755 $d/usr/local/bin/corral-hello-deb
dpkg-deb --root-owner-group --build $d /tmp/corral-hello.deb >/dev/null
p=$(mktemp -d)/corral-hello; mkdir -p $p/bin
printf '{"name":"corral-hello","version":"1.0.0","bin":{"corral-hello-js":"bin/hello.js"}}' > $p/package.json
printf '#!/usr/bin/env node\\nconsole.log("hello from npm")\\n' > $p/bin/hello.js
cd /tmp && npm pack --silent $p >/dev/null`)
  await sbx.runCode(`import base64, hashlib, zipfile
files = {'corral_hello.py': b'def hello():\\n    return "hello from a wheel"\\n',
         'corral_hello-1.0.dist-info/METADATA': b'Metadata-Version: 2.1\\nName: corral-hello\\nVersion: 1.0\\n',
         'corral_hello-1.0.dist-info/WHEEL': b'Wheel-Version: 1.0\\nGenerator: corral-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}
digest = lambda b: base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()
record = ''.join('%s,sha256=%s,%d\\n' % (n, digest(b), len(b)) for n, b in files.items()) + 'corral_hello-1.0.dist-info/RECORD,,\\n'
with zipfile.ZipFile('/tmp/corral_hello-1.0-py3-none-any.whl', 'w') as z:
    for n, b in files.items():
        z.writestr(n, b)
    z.writestr('corral_hello-1.0.dist-info/RECORD', record)`)
  await sbx.commands.run('dpkg -i /tmp/corral-hello.deb && pip install --no-index -q /tmp/corral_hello-1.0-py3-none-any.whl && npm install -g --offline --silent /tmp/corral-hello-1.0.0.tgz', { user: 'root', timeoutMs: 120_000 })
  const r = await sbx.commands.run(`corral-hello-deb; python3 -c 'import corral_hello; print(corral_hello.hello())'; corral-hello-js; dpkg -s corral-hello | grep ^Status`)
  assert.equal(r.stdout, 'hello from a deb\nhello from a wheel\nhello from npm\nStatus: install ok installed\n')
})

const dir = '/workspace/e2b-suite'

test('files: text and binary round-trip, list, exists, getInfo, rename, remove', async () => {
  assert.equal(await sbx.files.makeDir(dir), true)
  assert.equal(await sbx.files.makeDir(dir), false, 'makeDir of an existing directory')
  const info = await sbx.files.write(`${dir}/a.txt`, 'hello e2b\n')
  assert.equal(info.path, `${dir}/a.txt`)
  assert.equal(await sbx.files.read(`${dir}/a.txt`), 'hello e2b\n')

  const bytes = new Uint8Array(256 * 4)
  for (let i = 0; i < bytes.length; i++) bytes[i] = i % 256
  await sbx.files.write(`${dir}/b.bin`, bytes.buffer)
  const back = await sbx.files.read(`${dir}/b.bin`, { format: 'bytes' })
  assert.deepEqual(Buffer.from(back), Buffer.from(bytes))

  const names = (await sbx.files.list(dir)).map((e) => e.name).sort()
  assert.deepEqual(names, ['a.txt', 'b.bin'])
  assert.equal(await sbx.files.exists(`${dir}/a.txt`), true)
  assert.equal(await sbx.files.exists(`${dir}/none`), false)
  const st = await sbx.files.getInfo(`${dir}/b.bin`)
  assert.equal(st.type, 'file')
  assert.equal(st.size, bytes.length)
  assert.equal((await sbx.files.getInfo(dir)).type, 'dir')

  const moved = await sbx.files.rename(`${dir}/a.txt`, `${dir}/c.txt`)
  assert.equal(moved.path, `${dir}/c.txt`)
  assert.equal(await sbx.files.exists(`${dir}/a.txt`), false)
  assert.equal(await sbx.files.read(`${dir}/c.txt`), 'hello e2b\n')
  await sbx.files.remove(`${dir}/c.txt`)
  assert.equal(await sbx.files.exists(`${dir}/c.txt`), false)
  await assert.rejects(sbx.files.read(`${dir}/c.txt`), NotFoundError)
  // What runCode and commands see is the same file system.
  assert.equal((await sbx.runCode(`len(open('${dir}/b.bin', 'rb').read())`)).text, String(bytes.length))
})

test('watchDir sees a write', async () => {
  const wdir = `${dir}/watched`
  await sbx.files.makeDir(wdir)
  const events = []
  const h = await sbx.files.watchDir(wdir, (ev) => events.push(ev))
  try {
    await sbx.files.write(`${wdir}/w.txt`, 'watched')
    await until('a watch event for w.txt', async () => events.some((e) => e.name === 'w.txt'))
  } finally {
    await h.stop()
  }
})

test('Sandbox.connect from a second client sees the same files and context', async () => {
  await sbx.files.write(`${dir}/shared.txt`, 'shared')
  const second = await Sandbox.connect(sbx.sandboxId)
  assert.equal(second.sandboxId, sbx.sandboxId)
  assert.equal(await second.files.read(`${dir}/shared.txt`), 'shared')
  assert.equal((await second.runCode('x + 1')).text, '2')
  assert.equal(await second.isRunning(), true)
})

test('Sandbox.list filters by metadata', async () => {
  const mine = await BaseSandbox.list({ query: { metadata: { suite: run } } }).nextItems()
  assert.deepEqual(mine.map((s) => s.sandboxId), [sbx.sandboxId])
  assert.equal(mine[0].metadata.role, 'main')
  const none = await BaseSandbox.list({ query: { metadata: { suite: `${run}-none` } } }).nextItems()
  assert.deepEqual(none, [])
})

test("another tenant's key finds no sandbox (404)", async () => {
  await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: otherKey }), NotFoundError)
  await assert.rejects(BaseSandbox.getInfo(sbx.sandboxId, { apiKey: otherKey }), NotFoundError)
  assert.equal(await BaseSandbox.kill(sbx.sandboxId, { apiKey: otherKey }), false)
  const res = await fetch(`${apiURL}/sandboxes/${sbx.sandboxId}`, { headers: { 'X-API-Key': otherKey } })
  assert.equal(res.status, 404)
  assert.deepEqual(Object.keys(await res.json()).sort(), ['code', 'message'])
  const other = await BaseSandbox.list({ apiKey: otherKey, query: { metadata: { suite: run } } }).nextItems()
  assert.deepEqual(other, [])
  // The sandbox is untouched.
  assert.equal((await sbx.runCode('x + 1')).text, '2')
})

// sandboxFetch calls a sandbox's port through E2B_SANDBOX_URL with the
// headers the SDK sends, the access token as given.
function sandboxFetch(path, port, token, init = {}) {
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(port), ...(init.headers || {}) }
  if (token !== undefined) headers['X-Access-Token'] = token
  return fetch(`${sandboxURL}${path}`, { ...init, headers })
}

test('a wrong or missing access token is refused', async () => {
  const body = JSON.stringify({ code: '1 + 1' })
  const h = { 'Content-Type': 'application/json' }
  const missing = await sandboxFetch('/execute', 49999, undefined, { method: 'POST', body, headers: h })
  assert.equal(missing.status, 401)
  // A token that does not open the sandbox finds it gone (502), as one
  // for a sandbox that is not there: the answer tells nobody which ids
  // exist.
  const wrong = await sandboxFetch('/execute', 49999, `${sbx.envdAccessToken}x`, { method: 'POST', body, headers: h })
  assert.equal(wrong.status, 502)
  const tenant = sbx.envdAccessToken.split('.')[0]
  const envd = await sandboxFetch('/files?path=/etc/hostname', 49983, `${tenant}.${'0'.repeat(64)}`)
  assert.equal(envd.status, 502)
  // A sandbox the token's tenant does not have is gone, as E2B's proxy
  // answers (502), whoever else may have one of that id.
  const nosuch = await fetch(`${sandboxURL}/execute`, {
    method: 'POST',
    body,
    headers: { ...h, 'E2b-Sandbox-Id': 'i' + '0'.repeat(19), 'E2b-Sandbox-Port': '49999', 'X-Access-Token': `${tenant}.${'0'.repeat(64)}` },
  })
  assert.equal(nosuch.status, 502)
  // The SDK with a wrong token gets an error, never the sandbox.
  const forged = new Sandbox({ sandboxId: sbx.sandboxId, envdAccessToken: `${tenant}.wrong`, envdVersion: '0.5.7' })
  await assert.rejects(forged.runCode('1'))
  await assert.rejects(forged.files.read('/etc/hostname'))
})

test('a server started in the sandbox answers on its port, with the traffic token or made public', async () => {
  await sbx.commands.run('mkdir -p /tmp/www && echo served > /tmp/www/hello.txt')
  await sbx.commands.run('python3 -m http.server 3000 --directory /tmp/www', { background: true })
  assert.ok(sbx.getHost(3000).startsWith(`3000-${sbx.sandboxId}.`), sbx.getHost(3000))
  const get = (port, token, id = sbx.sandboxId) =>
    fetch(`${sandboxURL}/hello.txt`, {
      headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': String(port), ...(token ? { 'E2B-Traffic-Access-Token': token } : {}) },
    })
  await until('the server listens', async () => (await get(3000, sbx.trafficAccessToken)).status === 200)
  const ok = await get(3000, sbx.trafficAccessToken)
  assert.equal(await ok.text(), 'served\n')
  assert.equal((await get(3000, undefined)).status, 403)
  const closed = await get(3001, sbx.trafficAccessToken)
  assert.equal(closed.status, 502)
  assert.match((await closed.json()).message, /nothing listens on port 3001/)
  // Made with allowPublicTraffic, its ports take no token.
  const pub = await BaseSandbox.create(template, { timeoutMs: 120_000, network: { allowPublicTraffic: true } })
  try {
    await pub.commands.run('mkdir -p /tmp/www && echo public > /tmp/www/hello.txt')
    await pub.commands.run('python3 -m http.server 3000 --directory /tmp/www', { background: true })
    await until('the public server listens', async () => (await get(3000, undefined, pub.sandboxId)).status === 200)
    assert.equal(await (await get(3000, undefined, pub.sandboxId)).text(), 'public\n')
  } finally {
    await pub.kill()
  }
})

test('a malformed Connect frame gets a Connect error', async () => {
  const token = sbx.envdAccessToken
  const unary = await sandboxFetch('/filesystem.Filesystem/Stat', 49983, token, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' },
    body: '{"path": ',
  })
  assert.ok(unary.status >= 400 && unary.status < 500, `unary status ${unary.status}`)
  const ue = await unary.json()
  assert.equal(typeof ue.code, 'string', JSON.stringify(ue))
  // A stream whose envelope claims 1000 bytes and carries 3.
  const frame = Buffer.from([0, 0, 0, 0x03, 0xe8, 0x7b, 0x7d, 0x7d])
  const stream = await sandboxFetch('/process.Process/Start', 49983, token, {
    method: 'POST',
    headers: { 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' },
    body: frame,
  })
  const raw = Buffer.from(await stream.arrayBuffer())
  if (stream.status === 200) {
    // The error is in the end-of-stream envelope (flags 0x02).
    assert.ok(raw.length >= 5 && raw[0] & 0x02, `stream answer ${raw.toString('hex')}`)
    const end = JSON.parse(raw.subarray(5, 5 + raw.readUInt32BE(1)).toString())
    assert.equal(typeof end.error?.code, 'string', JSON.stringify(end))
  } else {
    assert.ok(stream.status >= 400 && stream.status < 500, `stream status ${stream.status}`)
    assert.equal(typeof JSON.parse(raw.toString()).code, 'string')
  }
  // The sandbox and the server are fine.
  assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
})

test('getMetrics answers readings of the sandbox: CPU, memory, disk', async () => {
  const first = await sbx.getMetrics()
  assert.ok(first.length >= 1, `${first.length} readings`)
  const m = first[first.length - 1]
  const shown = JSON.stringify(m)
  assert.ok(m.timestamp instanceof Date && Math.abs(Date.now() - m.timestamp.getTime()) < 3_600_000, shown)
  assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, shown)
  assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal && m.memCache >= 0, shown)
  assert.ok(m.diskUsed > 0 && m.diskUsed < m.diskTotal, shown)
  // 8 MiB written shows in a later reading (the server reads every 5 s).
  await sbx.commands.run('head -c 8388608 /dev/zero > metrics.bin && sync')
  await until('a reading with the file written', async () => {
    const all = await BaseSandbox.getMetrics(sbx.sandboxId, { start: new Date(Date.now() - 60_000) })
    return all.some((r) => r.diskUsed >= m.diskUsed + 8_000_000)
  }, 30_000)
  assert.deepEqual(await sbx.getMetrics({ start: new Date(Date.now() + 3_600_000) }), [])
  await sbx.commands.run('rm metrics.bin')
})

test('setTimeout extends; an expired sandbox is gone', async () => {
  const s = await Sandbox.create(template, { timeoutMs: 20_000, metadata: { suite: run, role: 'timeout' } })
  const before = (await s.getInfo()).endAt
  await s.setTimeout(120_000)
  const after = (await s.getInfo()).endAt
  assert.ok(after.getTime() - before.getTime() > 60_000, `endAt ${before.toISOString()} -> ${after.toISOString()}`)
  await s.setTimeout(2_000)
  await until('the sandbox to expire', async () => !(await s.isRunning()), 30_000)
  await assert.rejects(Sandbox.connect(s.sandboxId), NotFoundError)
  await assert.rejects(s.runCode('1'))
})

test('kill', async () => {
  const s = await Sandbox.create(template, { timeoutMs: 120_000, metadata: { suite: run, role: 'kill' } })
  assert.equal((await s.commands.run('echo up')).stdout, 'up\n')
  assert.equal(await s.kill(), true)
  assert.equal(await s.isRunning(), false)
  assert.equal(await BaseSandbox.kill(s.sandboxId), false)
  await assert.rejects(BaseSandbox.getInfo(s.sandboxId), NotFoundError)
})

test('pause, then connect resumes: files kept, and on gVisor the context too', async () => {
  const tier = process.env.CORRAL_E2B_TIER
  const s = await Sandbox.create(template, { timeoutMs: 300_000, metadata: { suite: run, role: 'pause' } })
  try {
    await s.files.write('/workspace/kept.txt', 'kept')
    await s.commands.run('touch /usr/local/bin/kept', { user: 'root' })
    assert.equal((await s.runCode('y = 7')).error, undefined)
    assert.equal(await s.pause(), true)
    assert.equal(await s.pause(), false) // already paused: 409
    assert.equal((await BaseSandbox.getInfo(s.sandboxId)).state, 'paused')
    // A plain call on a paused sandbox fails; connect resumes it.
    await assert.rejects(s.commands.run('true'))
    const back = await Sandbox.connect(s.sandboxId)
    assert.equal((await BaseSandbox.getInfo(s.sandboxId)).state, 'running')
    assert.equal(await back.files.read('/workspace/kept.txt'), 'kept')
    assert.equal((await back.commands.run('ls /usr/local/bin/kept')).stdout, '/usr/local/bin/kept\n')
    const y = await back.runCode('y')
    if (tier === 'gvisor') {
      assert.equal(y.text, '7') // its memory came back
    } else if (tier === 'container') {
      assert.equal(y.error?.name, 'NameError') // files only on runc
    }
  } finally {
    await s.kill()
  }
})

test("lifecycle onTimeout 'pause': paused at the timeout, connect resumes: files kept, and on gVisor the context too", async () => {
  const tier = process.env.CORRAL_E2B_TIER
  const s = await Sandbox.create(template, {
    timeoutMs: 12_000, lifecycle: { onTimeout: 'pause' }, metadata: { suite: run, role: 'autopause' },
  })
  try {
    assert.deepEqual((await s.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false })
    // Done before its timeout (a call running at the timeout ends with
    // the pause, as with a kill).
    await s.files.write('/workspace/kept.txt', 'kept')
    assert.equal((await s.runCode('z = 9')).error, undefined)
    await until('the pause at the timeout', async () => (await BaseSandbox.getInfo(s.sandboxId)).state === 'paused', 30_000)
    const back = await Sandbox.connect(s.sandboxId, { timeoutMs: 300_000 })
    assert.equal((await BaseSandbox.getInfo(s.sandboxId)).state, 'running')
    assert.equal(await back.files.read('/workspace/kept.txt'), 'kept')
    const z = await back.runCode('z')
    if (tier === 'gvisor') {
      assert.equal(z.text, '9') // its memory came back
    } else if (tier === 'container') {
      assert.equal(z.error?.name, 'NameError') // files only on runc
    }
  } finally {
    await s.kill()
  }
})

test('autoResume: an HTTP request to a port of a sandbox paused at its timeout resumes it', async () => {
  const tier = process.env.CORRAL_E2B_TIER
  const s = await BaseSandbox.create(template, {
    timeoutMs: 12_000, lifecycle: { onTimeout: 'pause', autoResume: true }, metadata: { suite: run, role: 'autoresume' },
  })
  try {
    assert.deepEqual((await s.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
    await s.commands.run('mkdir -p /tmp/www && echo woke > /tmp/www/hello.txt')
    await s.commands.run('python3 -m http.server 3000 --directory /tmp/www', { background: true })
    const get = () => fetch(`${sandboxURL}/hello.txt`, {
      headers: { 'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': '3000', 'E2B-Traffic-Access-Token': s.trafficAccessToken },
    })
    await until('the server listens', async () => (await get()).status === 200)
    await until('the pause at the timeout', async () => (await BaseSandbox.getInfo(s.sandboxId)).state === 'paused', 30_000)
    const res = await get()
    if (tier === 'gvisor') {
      // Its memory came back: the server answers the request that woke it.
      assert.equal(res.status, 200)
      assert.equal(await res.text(), 'woke\n')
    } else {
      // Resumed with its files only: nothing listens any more.
      assert.equal(res.status, 502)
    }
    assert.equal((await BaseSandbox.getInfo(s.sandboxId)).state, 'running')
  } finally {
    await s.kill()
  }
})

test('createSnapshot, then Sandbox.create(snapshotId): files kept, and on gVisor the context too; listSnapshots, deleteSnapshot', async () => {
  const tier = process.env.CORRAL_E2B_TIER
  const s = await Sandbox.create(template, { timeoutMs: 300_000, metadata: { suite: run, role: 'snapshot' } })
  const made = []
  try {
    await s.files.write('/workspace/kept.txt', 'kept')
    assert.equal((await s.runCode('w = 11')).error, undefined)
    const snap = await s.createSnapshot({ name: `snap-${process.pid}` })
    assert.match(snap.snapshotId, /^snap_/)
    assert.deepEqual(snap.names, [`snap-${process.pid}`])
    // The sandbox runs on, its context too.
    assert.equal((await s.runCode('w')).text, '11')
    await s.files.write('/workspace/after.txt', 'after')
    const listed = await s.listSnapshots().nextItems()
    assert.deepEqual(listed.map((x) => x.snapshotId), [snap.snapshotId])
    const all = []
    for (const p = BaseSandbox.listSnapshots({ limit: 1 }); p.hasNext;) all.push(...await p.nextItems())
    assert.ok(all.some((x) => x.snapshotId === snap.snapshotId), JSON.stringify(all))
    // Another tenant sees none of it.
    const others = await BaseSandbox.listSnapshots({ apiKey: otherKey }).nextItems()
    assert.ok(!others.some((x) => x.snapshotId === snap.snapshotId))
    await assert.rejects(Sandbox.create(snap.snapshotId, { apiKey: otherKey }))

    const copy = await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000, metadata: { suite: run, role: 'from-snapshot' } })
    made.push(copy)
    assert.notEqual(copy.sandboxId, s.sandboxId)
    assert.equal(await copy.files.read('/workspace/kept.txt'), 'kept')
    assert.equal(await copy.files.exists('/workspace/after.txt'), false)
    const w = await copy.runCode('w')
    if (tier === 'gvisor') {
      assert.equal(w.text, '11') // its memory came with it
    } else if (tier === 'container') {
      assert.equal(w.error?.name, 'NameError') // files only on runc
    }
    // By its name too.
    const named = await Sandbox.create(`snap-${process.pid}`, { timeoutMs: 60_000, metadata: { suite: run, role: 'from-name' } })
    made.push(named)
    assert.equal(await named.files.read('/workspace/kept.txt'), 'kept')

    assert.equal(await BaseSandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await BaseSandbox.deleteSnapshot(snap.snapshotId), false)
    await assert.rejects(Sandbox.create(snap.snapshotId))
    // Sandboxes made from it live on.
    assert.equal(await copy.files.read('/workspace/kept.txt'), 'kept')
  } finally {
    for (const m of made) await m.kill()
    await s.kill()
  }
})

test('fork gives sandboxes that diverge', async () => {
  const tier = process.env.CORRAL_E2B_TIER
  const s = await Sandbox.create(template, { timeoutMs: 300_000, metadata: { suite: run, role: 'fork' } })
  let forks = []
  try {
    await s.files.write('/workspace/base.txt', 'base')
    assert.equal((await s.runCode('v = 3')).error, undefined)
    forks = await s.fork({ count: 2, timeoutMs: 120_000 })
    assert.equal(forks.length, 2)
    for (const f of forks) assert.ok(f instanceof Sandbox, String(f))
    const ids = new Set([s.sandboxId, ...forks.map((f) => f.sandboxId)])
    assert.equal(ids.size, 3)
    for (const [i, f] of forks.entries()) {
      assert.equal(await f.files.read('/workspace/base.txt'), 'base')
      await f.files.write(`/workspace/fork-${i}.txt`, `${i}`)
      if (tier === 'gvisor') {
        assert.equal((await f.runCode('v')).text, '3')
        assert.equal((await f.runCode(`v = ${10 + i}`)).error, undefined)
      }
    }
    for (const [i, f] of forks.entries()) {
      assert.equal(await f.files.read(`/workspace/fork-${i}.txt`), `${i}`)
      assert.equal(await f.files.exists(`/workspace/fork-${1 - i}.txt`), false)
      if (tier === 'gvisor') assert.equal((await f.runCode('v')).text, `${10 + i}`)
    }
    assert.equal(await s.files.exists('/workspace/fork-0.txt'), false)
    if (tier === 'gvisor') assert.equal((await s.runCode('v')).text, '3')
    // The forks' snapshot is not listed.
    assert.deepEqual(await s.listSnapshots().nextItems(), [])
  } finally {
    for (const f of forks) if (f instanceof Sandbox) await f.kill()
    await s.kill()
  }
})

test('pty: a terminal that follows a resize', async () => {
  let out = ''
  const decoder = new TextDecoder()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += decoder.decode(d) }, timeoutMs: 60_000 })
  try {
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('tty; stty size\n'))
    await until('the terminal to answer', async () => /\/dev\/pts\/\d+/.test(out) && out.includes('24 80'))
    await sbx.pty.resize(h.pid, { cols: 100, rows: 40 })
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size\n'))
    await until('the new size', async () => out.includes('40 100'))
  } finally {
    await sbx.pty.kill(h.pid)
  }
})

// auditEvents reads every page of Corral's GET /v1/audit with key.
async function auditEvents(key, query) {
  const out = []
  let cursor = ''
  for (;;) {
    const res = await fetch(`${apiURL}/v1/audit?${query}${cursor ? `&cursor=${cursor}` : ''}`, { headers: { Authorization: `Bearer ${key}` } })
    assert.equal(res.status, 200, await res.clone().text())
    const page = await res.json()
    out.push(...page.events)
    if (!page.next_cursor) return out
    cursor = page.next_cursor
  }
}

test("the audit trail: each action on a sandbox, with the caller's key and the sandbox; the other tenant sees none", async () => {
  const key = env('E2B_API_KEY')
  const sha = (s) => createHash('sha256').update(s).digest('hex')
  const keyID = sha(key).slice(0, 16)
  const s = await Sandbox.create(template, { timeoutMs: 300_000, metadata: { suite: run, role: 'audit' } })
  try {
    await s.commands.run('echo audited')
    await s.files.write('/home/user/audit.txt', 'abc')
    await s.files.rename('/home/user/audit.txt', '/home/user/audit2.txt')
    await s.files.remove('/home/user/audit2.txt')
    assert.equal((await s.runCode('6 * 7')).text, '42')
    const h = await s.pty.create({ cols: 80, rows: 24, onData: () => {}, timeoutMs: 60_000 })
    await s.pty.sendInput(h.pid, new TextEncoder().encode('exit\n'))
    await h.wait().catch(() => {})
    assert.equal(await s.pause(), true)
    await Sandbox.connect(s.sandboxId)
  } finally {
    await s.kill()
  }
  const want = [
    ['sandbox.create', {}, 'key'],
    ['process.start', { argv: /echo audited/ }, 'token'],
    ['file.write', { path: '/home/user/audit.txt', size: '3', sha256: sha('abc') }, 'token'],
    ['file.rename', { from: '/home/user/audit.txt', to: '/home/user/audit2.txt' }, 'token'],
    ['file.remove', { path: '/home/user/audit2.txt' }, 'token'],
    ['context.run', { code_sha256: sha('6 * 7') }, 'token'],
    ['process.end', { pty: 'true', stdin_bytes: '5' }, 'token'],
    ['sandbox.pause', {}, 'key'],
    ['sandbox.resume', {}, 'key'],
    ['sandbox.kill', {}, 'key'],
  ]
  const matches = (e, [action, fields]) => e.action === action &&
    Object.entries(fields).every(([k, v]) => (v instanceof RegExp ? v.test(e.fields?.[k] ?? '') : e.fields?.[k] === v))
  let events = []
  await until('every action in the audit trail', async () => {
    events = await auditEvents(key, `sandbox_id=${s.sandboxId}&limit=5`)
    return want.every((w) => events.some((e) => matches(e, w)))
  }).catch((err) => {
    const missing = want.filter((w) => !events.some((e) => matches(e, w))).map((w) => w[0])
    throw new Error(`${err.message}: missing ${missing} among ${JSON.stringify(events)}`)
  })
  const tenant = events[0].tenant
  for (const w of want) {
    for (const e of events.filter((e) => matches(e, w))) {
      assert.equal(e.sandbox_id, s.sandboxId)
      assert.equal(e.tenant, tenant)
      // The API's calls carry the key; envd's and the interpreter's carry
      // the sandbox's access token (its create names the key).
      if (w[2] === 'key') assert.equal(e.key_id, keyID, `${e.action}: ${JSON.stringify(e)}`)
      else assert.match(e.key_id, /^token:[0-9a-f]{16}$/, `${e.action}: ${JSON.stringify(e)}`)
    }
  }
  assert.deepEqual(await auditEvents(otherKey, `sandbox_id=${s.sandboxId}`), [])
  assert.equal((await auditEvents(otherKey, 'limit=1000')).filter((e) => e.tenant === tenant).length, 0)
})
