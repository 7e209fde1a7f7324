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
const fs = require('fs');
const chromium = require('./chromium_pipe');

const texts = process.argv.slice(3).map((f) => fs.readFileSync(f, 'utf8'));
const {send, finish} = chromium.start(process.argv[2], [], 'devtools');

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

(async () => {
  const target = await send('Target.createTarget',
    {url: 'devtools://devtools/bundled/devtools_app.html'});
  const {sessionId} = await send('Target.attachToTarget',
    {targetId: target.targetId, flatten: true});
  let reply;
  for (let tries = 0; tries < 50; tries++) {
    reply = await send('Runtime.evaluate', {
      expression: loadOne.toString() + ';(' + loadInDevTools.toString() +
        ')(' + JSON.stringify(texts) + ')',
      awaitPromise: true, returnByValue: true}, sessionId);
    if (!reply.exceptionDetails) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (reply.exceptionDetails) {
    process.stderr.write(JSON.stringify(reply) + '\n');
    return finish(1);
  }
  finish(0, reply.result.value);
})().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  finish(1);
});
