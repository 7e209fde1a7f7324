// Loads a .heapsnapshot file with memlab's heap API
// (@memlab/heap-analysis, getFullHeapFromFile: memlab's parser, its
// dominators and retained sizes) and prints what memlab computed, as
// JSON: every node ([id, type, name, self size, retained size, location
// as [script id, line, column] or null]) and the root's edges ([name or
// index, type, target id]).
//
//   NODE_PATH=build/node_modules node heapsnapshot_memlab.js FILE
const {getFullHeapFromFile} = require('@memlab/heap-analysis');

(async () => {
  const log = console.log;
  console.log = () => {};
  const heap = await getFullHeapFromFile(process.argv[2]);
  console.log = log;
  const nodes = [];
  let root = null;
  heap.nodes.forEach((node) => {
    const at = node.location;
    nodes.push([node.id, node.type, node.name, node.self_size,
      node.retainedSize, at ? [at.script_id, at.line, at.column] : null]);
    if (node.id === 1) root = node;
  });
  const edges = root.references.map((edge) =>
    [edge.name_or_index, edge.type, edge.toNode.id]);
  process.stdout.write(JSON.stringify({nodes, edges}) + '\n');
})().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
