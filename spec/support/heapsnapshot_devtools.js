// Loads a .heapsnapshot file with Chrome DevTools' own loader, in a real
// headless Chromium: the DevTools frontend that Chromium bundles is
// opened (devtools://devtools/bundled/devtools_app.html) through the
// DevTools protocol (--remote-debugging-pipe), and its heap snapshot
// worker module (HeapSnapshotLoader, then the snapshot's initialisation,
// retained sizes by its second-thread manager) reads the file as the
// Memory panel does.  Prints what DevTools computed, as JSON: every node
// ([id, name, class name, self size, retained size, location as [script
// id, line, column] or null]), the root's edges
// ([name, type, target id]), and each allocation stack by node id; for
// each file, in a list (one Chromium for them all).
//
//   node heapsnapshot_devtools.js CHROMIUM FILE...
const {spawn} = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const binary = process.argv[2];
const texts = process.argv.slice(3).map((f) => fs.readFileSync(f, 'utf8'));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'memprof-devtools-'));
const chrome = spawn(binary, ['--headless', '--no-sandbox', '--disable-gpu',
  '--disable-background-networking', '--disable-component-update',
  '--no-first-run', '--remote-debugging-pipe', '--user-data-dir=' + dir,
  'about:blank'], {stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
  detached: true});
const toChrome = chrome.stdio[3];
const fromChrome = chrome.stdio[4];
let lastId = 0;
let pending = '';
const waiting = new Map();
fromChrome.on('data', (data) => {
  pending += data.toString();
  for (let at = pending.indexOf('\0'); at >= 0; at = pending.indexOf('\0')) {
    const message = JSON.parse(pending.slice(0, at));
    pending = pending.slice(at + 1);
    const done = waiting.get(message.id);
    if (done) {
      waiting.delete(message.id);
      done(message);
    }
  }
});

function send(method, params, sessionId) {
  const message = {id: ++lastId, method, params: params || {}};
  if (sessionId) message.sessionId = sessionId;
  toChrome.write(JSON.stringify(message) + '\0');
  return new Promise((resolve) => waiting.set(message.id, resolve));
}

// Runs in the DevTools page: the snapshot through DevTools' loader.
async function loadInDevTools(texts) {
  const out = [];
  for (const text of texts) out.push(await loadOne(text));
  return JSON.stringify(out);
}

async function loadOne(snapshotText) {
  const worker = await import(
    './entrypoints/heap_snapshot_worker/heap_snapshot_worker.js');
  const loader = new worker.HeapSnapshotLoader.HeapSnapshotLoader();
  loader.write(snapshotText);
  loader.close();
  const channel = new MessageChannel();
  new worker.HeapSnapshot.SecondaryInitManager(channel.port2);
  const snapshot = await loader.buildSnapshot(channel.port1);
  const node = snapshot.rootNode();
  const nodes = [];
  const stacks = {};
  for (let i = 0; i < snapshot.nodeCount; i++) {
    node.nodeIndex = i * snapshot.nodeFieldCount;
    const at = snapshot.getLocation(node.nodeIndex);
    nodes.push([node.id(), node.name(), node.className(), node.selfSize(),
      node.retainedSize(),
      at ? [at.scriptId, at.lineNumber, at.columnNumber] : null]);
    if (node.traceNodeId()) {
      stacks[node.id()] = (snapshot.allocationStack(node.nodeIndex) || [])
        .map((f) => [f.functionName, f.scriptName, f.line]);
    }
  }
  const edges = [];
  for (const it = snapshot.rootNode().edges(); it.hasNext(); it.next()) {
    const edge = it.item();
    edges.push([edge.name(), edge.type(), edge.node().id()]);
  }
  return {nodes, edges, stacks};
}

// Ends Chromium and every process it started (its own process group),
// then removes its profile directory, which they may still be writing a
// moment after the browser's exit.
function finish(code, output) {
  chrome.on('exit', () => {
    try {
      process.kill(-chrome.pid, 'SIGKILL');
    } catch (e) {
      // (The group is gone already.)
    }
    fs.rmSync(dir, {recursive: true, force: true, maxRetries: 50,
      retryDelay: 100});
    if (output) process.stdout.write(output + '\n');
    process.exit(code);
  });
  chrome.kill();
}

(async () => {
  const target = await send('Target.createTarget',
    {url: 'devtools://devtools/bundled/devtools_app.html'});
  const attached = await send('Target.attachToTarget',
    {targetId: target.result.targetId, flatten: true});
  const session = attached.result.sessionId;
  let result;
  for (let tries = 0; tries < 50; tries++) {
    result = await send('Runtime.evaluate', {
      expression: loadOne.toString() + ';(' + loadInDevTools.toString() +
        ')(' + JSON.stringify(texts) + ')',
      awaitPromise: true, returnByValue: true}, session);
    if (!(result.result && result.result.exceptionDetails)) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (!result.result || result.result.exceptionDetails) {
    process.stderr.write(JSON.stringify(result) + '\n');
    return finish(1);
  }
  finish(0, result.result.result.value);
})().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  finish(1);
});
