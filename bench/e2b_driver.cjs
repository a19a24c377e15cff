// Drives the stock E2B SDK (@e2b/code-interpreter, as installed for
// test/e2b) for BenchmarkLive: one command a line on stdin, one answer a
// line on stdout ("ok", or "error: WHY"), so that the Go harness times each
// call as it times its own rows. E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY name the server; CORRAL_E2B_MODULES the directory whose
// node_modules holds the SDK.
'use strict'
const path = require('node:path')
const readline = require('node:readline')
const { createRequire } = require('node:module')

const sdk = createRequire(path.join(process.env.CORRAL_E2B_MODULES, 'package.json'))('@e2b/code-interpreter')
const timeoutMs = 30 * 60 * 1000

let main // the sandbox whose default context holds x = 1
let made // the sandbox the last create made
let v1ctx // a context of main's made through Corral's own /v1 API, holding x = 1

// v1 calls Corral's own API with node's fetch, as the SDK calls E2B's: the
// baseline that shows what the E2B layer itself costs.
async function v1(path, body) {
  const res = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes/${main.sandboxId}${path}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${process.env.E2B_API_KEY}`, 'Content-Type': 'application/json', Accept: 'application/json' },
    body: JSON.stringify(body),
  })
  const out = await res.json()
  if (!res.ok) throw new Error(`${path}: ${res.status} ${JSON.stringify(out)}`)
  return out
}

// mainText is the text/plain of a /v1 cell's main result.
function mainText(events) {
  const r = events.find((e) => e.type === 'result' && e.is_main_result)
  return r ? r.data['text/plain'] : undefined
}

const commands = {
  async setup() {
    main = await sdk.Sandbox.create({ timeoutMs })
    const ex = await main.runCode('x = 1')
    if (ex.error) throw new Error(`x = 1 raised ${ex.error.name}: ${ex.error.value}`)
    v1ctx = (await v1('/contexts', { language: 'python' })).id
    await v1(`/contexts/${v1ctx}/run`, { code: 'x = 1' })
  },
  async create() {
    made = await sdk.Sandbox.create({ timeoutMs })
  },
  async kill() {
    await made.kill()
    made = undefined
  },
  async run() {
    const ex = await main.runCode('x + 1')
    if (ex.error || ex.text !== '2') throw new Error(`x + 1 gave ${JSON.stringify(ex.text)} ${ex.error ? ex.error.value : ''}`)
  },
  async v1run() {
    const { events } = await v1(`/contexts/${v1ctx}/run`, { code: 'x + 1' })
    if (mainText(events) !== '2') throw new Error(`x + 1 through /v1 gave ${JSON.stringify(events)}`)
  },
  async close() {
    if (main) await main.kill()
    main = undefined
  },
}

async function serve() {
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const cmd = commands[line.trim()]
    try {
      if (!cmd) throw new Error(`unknown command ${JSON.stringify(line)}`)
      await cmd()
      process.stdout.write('ok\n')
    } catch (e) {
      process.stdout.write(`error: ${String((e && e.message) || e).replace(/\n/g, ' ')}\n`)
    }
  }
}

serve()
