// Imports a file with speedscope's own importer (the one its web page
// uses when a file is dropped on it) and prints what speedscope made of
// it, as JSON:
//   { "importer": "<what speedscope said it imported the file as>",
//     "name": ..., "total": <total weight>, "unit": ...,
//     "stacks": { "outer;...;inner": <self weight>, ... },
//     "frames": { "<frame>": <total weight>, ... } }
//
//   node speedscope_import.js SPEEDSCOPE_PACKAGE_DIR FILE
//
// speedscope ships as a bundle for browsers.  This loads the bundle in a
// separate context with the few browser objects it touches while
// loading, and replaces the last statement, which draws the page, by one
// that hands out the importer (importProfileGroupFromText); nothing else
// of speedscope is changed.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

function fail(message) {
  process.stderr.write(message + '\n');
  process.exit(2);
}

function loadImporter(packageDir) {
  const dir = path.join(packageDir, 'dist', 'release');
  const bundle = fs.readdirSync(dir).find(f => /^speedscope-.*\.js$/.test(f));
  if (!bundle) fail('no speedscope bundle in ' + dir);
  let source = fs.readFileSync(path.join(dir, bundle), 'utf8');
  const importer = /async function ([\w$]+)\(\w+,\w+\)\{return\(await [\w$]+\)\.importProfileGroupFromText\(\w+,\w+\)\}/.exec(source);
  const render = /console\.log\(`speedscope v\$\{[\w$]+\(\)\.version\}`\);[^\n]*\}\)\(\);/;
  if (!importer || !render.test(source)) fail('unknown speedscope bundle: ' + bundle);
  source = source.replace(render, () => `globalThis.importText=${importer[1]};})();`);
  const logged = [];
  const context = {
    console: { log: m => logged.push(String(m)), error: m => logged.push(String(m)),
      warn: m => logged.push(String(m)), assert() {} },
    location: { hash: '', protocol: 'file:', href: 'file:///speedscope' },
    localStorage: {},
    matchMedia: () => ({ matches: false, addEventListener() {}, addListener() {} }),
    navigator: { userAgent: 'node' },
    requestAnimationFrame: f => setTimeout(f, 0),
    setTimeout, clearTimeout, TextDecoder, TextEncoder, URL,
  };
  context.window = context;
  context.self = context;
  vm.createContext(context);
  vm.runInContext(source, context);
  return { importText: context.importText, logged };
}

function walk(node, names, stacks) {
  for (const child of node.children) {
    const path = names.concat([child.frame.name]);
    if (child.getSelfWeight() > 0) {
      const key = path.join(';');
      stacks[key] = (stacks[key] || 0) + child.getSelfWeight();
    }
    walk(child, path, stacks);
  }
}

async function main() {
  const [packageDir, file] = process.argv.slice(2);
  if (!packageDir || !file) fail('usage: node speedscope_import.js PACKAGE_DIR FILE');
  const { importText, logged } = loadImporter(packageDir);
  const group = await importText(path.basename(file), fs.readFileSync(file, 'utf8'));
  if (!group) fail('speedscope did not recognise ' + file + ': ' + logged.join(' | '));
  const profile = group.profiles[0];
  const frames = {};
  profile.forEachFrame(frame => { frames[frame.name] = frame.getTotalWeight(); });
  const stacks = {};
  walk(profile.getGroupedCalltreeRoot(), [], stacks);
  const importer = logged.find(m => m.startsWith('Importing')) || '';
  process.stdout.write(JSON.stringify({ importer, name: group.name,
    total: profile.getTotalWeight(), unit: profile.getWeightUnit(),
    stacks, frames }) + '\n');
}

main().catch(err => fail(String(err && err.stack || err)));
