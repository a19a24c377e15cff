// An agent-style loop on E2B's stock SDK, unchanged, running on Corral.
// Point the SDK at Corral with two variables and a Corral key:
//
//   export E2B_API_URL=http://127.0.0.1:8080 E2B_SANDBOX_URL=http://127.0.0.1:8080
//   export E2B_API_KEY=$(cat /var/lib/corral/dev-api-key)
//   npm ci && node agent.js
//
// A real agent asks a model for the next step and feeds back what the step
// gave; here the "model" is a fixed plan, so the example runs without one.
import { Sandbox } from '@e2b/code-interpreter'

// Each step is a tool call the model made: code to run, a shell command,
// or a file to read.
const plan = [
  { tool: 'python', code: 'import pandas as pd\ndf = pd.DataFrame({"n": range(1, 11)})\nprint(f"mean = {df.n.mean()}")\ndf.describe()' },
  { tool: 'python', code: 'df["square"] = df.n ** 2\ndf.to_csv("/workspace/report.csv", index=False)\n"/workspace/report.csv"' },
  { tool: 'shell', cmd: 'wc -l < /workspace/report.csv' },
  { tool: 'python', code: 'total = float(df.n.sum())\ntotal / len(df[df.n > 10])' },
]

// observe turns what a step gave into what the model would read next.
function observe(ex) {
  if (ex.error) return `error ${ex.error.name}: ${ex.error.value}`
  const out = ex.logs.stdout.join('').trim()
  const main = ex.results.find((r) => r.isMainResult)
  const kinds = main ? main.formats().join(', ') : 'none'
  return [out, main ? `result ${main.text.split('\n')[0]} (formats: ${kinds || 'text'})` : ''].filter(Boolean).join('; ')
}

const sbx = await Sandbox.create({ timeoutMs: 5 * 60_000, metadata: { example: 'e2b-js' } })
console.log(`sandbox ${sbx.sandboxId} ready`)
try {
  for (const [i, step] of plan.entries()) {
    let seen
    if (step.tool === 'python') {
      const ex = await sbx.runCode(step.code)
      seen = observe(ex)
      if (i === 1 && !ex.error) seen = `wrote ${ex.text.replaceAll("'", '')}`
    } else {
      const r = await sbx.commands.run(step.cmd)
      seen = `report.csv has ${r.stdout.trim()} lines (exit ${r.exitCode})`
    }
    console.log(`step ${i + 1}: ${seen}${seen.startsWith('error') ? ' (fed back to the model)' : ''}`)
  }
  const csv = await sbx.files.read('/workspace/report.csv')
  console.log(`report.csv, read back: ${csv.split('\n')[1]} ... (${csv.length} bytes)`)
} finally {
  await sbx.kill()
}
console.log('done, sandbox killed')
