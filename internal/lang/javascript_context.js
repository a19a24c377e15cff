// Corral's javascript code context runner: one node process per context,
// whose globals, functions and required modules carry over from cell to
// cell (internal/kernel has the whole picture).
//
// The agent starts `node -e <this file>` with cells on stdin, one JSON
// request per line ({"cell": CELL, "code": "..."}), its raw output on stdout
// and stderr, and the event stream on fd 3: the events of
// python_context.py, in the same order. Each cell runs as a script in the
// process's own global context (vm.runInThisContext), so top-level `var`
// and function declarations become globals and `let`/`const` stay in the
// global scope (declaring one again is a SyntaxError, as in a script). The
// value of the cell's last expression is its main result (text/plain, by
// util.inspect); a promise is awaited first. console.* write events; what
// process.stdout/stderr and subprocesses write is raw output. node cannot
// fork, so neither do its contexts.
//
// SIGINT stops a running cell (its error is named KeyboardInterrupt, as
// every context's interrupted cell is), but only as well as node's
// vm.runInThisContext breakOnSigint does: a SIGINT that lands as node
// sets its SIGINT watchdog up or tears it down (the SIGINT listeners are
// removed meanwhile) either kills the process (the host restarts the
// context) or ends the runner's JavaScript for good (the cell never ends;
// past a timeout, the host restarts the context). An interrupt of a
// javascript context is best effort.
'use strict';
const fs = require('fs');
const vm = require('vm');
const util = require('util');
const { Console } = require('console');
const { createRequire } = require('module');

const STDOUT_FD = 1;
const STDERR_FD = 2;
const EVENT_FD = 3;
// The end marker on the raw streams (python_context.py says why).
const rawEndMark = (cell) => `\0corral-end:${cell}\0`;
// The name every runner gives an interrupted cell's error.
const INTERRUPTED = 'KeyboardInterrupt';
const INTERRUPT_CODE = 'ERR_SCRIPT_EXECUTION_INTERRUPTED';
// Cells are compiled under this name, with their number.
const cellFilename = (n) => `<cell ${n}>`;

const state = {
  cell: 0, // the running (or last) cell's id
  count: 0, // cells run
  interrupt: null, // rejects the awaited result of the running cell
  queue: [], // requests not run yet
  running: false,
  pending: '', // request text after the last newline
};

// Write all of s to fd (a pipe may take it in parts).
function writeAll(fd, s) {
  const b = Buffer.from(s);
  for (let off = 0; off < b.length;) {
    try {
      off += fs.writeSync(fd, b, off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

// Write one event of the running cell.
function emit(ev) {
  ev.cell = state.cell;
  writeAll(EVENT_FD, JSON.stringify(ev) + '\n');
}

// What console writes to: each write an event of the given type, at once.
// Not a stream.Writable: an interrupt that stops a cell inside a write
// would leave a stream's state mid-write, and its later writes buffered.
function eventStream(type) {
  return {
    write(chunk) {
      emit({ type, text: String(chunk) });
      return true;
    },
    // console listens for a stream's errors around each write.
    on() { return this; },
    once() { return this; },
    removeListener() { return this; },
    listenerCount() { return 0; },
  };
}

// The error event of e: its name and message, and its stack down to the
// first frame of the runner's own.
function errorEvent(e) {
  if (e && e.code === INTERRUPT_CODE) {
    return { type: 'error', name: INTERRUPTED, value: '', traceback: [] };
  }
  if (!(e instanceof Error)) {
    return { type: 'error', name: 'Error', value: 'Uncaught ' + util.inspect(e), traceback: [] };
  }
  const lines = String(e.stack || e).split('\n');
  const own = lines.findIndex((l) => l.includes('node:vm') || l.includes('[eval]'));
  return {
    type: 'error', name: e.name || 'Error', value: e.message || '',
    traceback: lines.slice(0, own < 0 ? lines.length : own).map((l) => l + '\n'),
  };
}

// Run one cell: its code, the value of its last expression (awaited if a
// promise), its error, its end.
async function runCell(request) {
  state.cell = request.cell || 0;
  state.count += 1;
  emit({ type: 'number_of_executions', execution_count: state.count });
  try {
    let value = vm.runInThisContext(String(request.code || ''), {
      filename: cellFilename(state.count), breakOnSigint: true,
    });
    if (value && typeof value.then === 'function') {
      value = await Promise.race([value, new Promise((_, reject) => { state.interrupt = reject; })]);
    }
    if (value !== undefined) {
      emit({ type: 'result', data: { 'text/plain': util.inspect(value) }, is_main_result: true });
    }
  } catch (e) {
    emit(errorEvent(e));
  } finally {
    state.interrupt = null;
  }
  for (const fd of [STDOUT_FD, STDERR_FD]) {
    try {
      writeAll(fd, rawEndMark(state.cell));
    } catch (e) {
      // A cell that closed it gets no marker; the host waits a little.
    }
  }
  emit({ type: 'end_of_execution' });
}

// Run the queued requests, one at a time.
async function drain() {
  if (state.running) return;
  state.running = true;
  while (state.queue.length > 0) {
    await runCell(state.queue.shift());
  }
  state.running = false;
}

// Requests arrive on stdin, one JSON object per line.
function onRequests(chunk) {
  state.pending += chunk;
  let i;
  while ((i = state.pending.indexOf('\n')) >= 0) {
    const line = state.pending.slice(0, i);
    state.pending = state.pending.slice(i + 1);
    try {
      state.queue.push(JSON.parse(line));
    } catch (e) {
      // Not a request.
    }
  }
  drain();
}

// SIGINT outside a synchronous run (which breakOnSigint stops): the awaited
// result of the running cell, if any, fails.
function onSigint() {
  if (state.interrupt) {
    const e = new Error('interrupted');
    e.code = INTERRUPT_CODE;
    state.interrupt(e);
  }
}

function main() {
  globalThis.require = createRequire(process.cwd() + '/');
  globalThis.console = new Console({ stdout: eventStream('stdout'), stderr: eventStream('stderr') });
  process.on('SIGINT', onSigint);
  process.on('uncaughtException', (e) => emit(errorEvent(e)));
  process.on('unhandledRejection', (e) => emit(errorEvent(e)));
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', onRequests);
  process.stdin.on('end', () => process.exit(0));
}

main();
