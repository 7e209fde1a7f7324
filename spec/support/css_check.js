// Checks a style sheet with css-tree (npm css-tree, installed into
// build/node_modules by .ci/install-deps; run with NODE_PATH pointing
// there): node css_check.js FILE prints the JSON of
//   { rules: <style rules>, declarations: <declarations>,
//     errors: [ 'line N: ...', ... ] }
// where errors lists what does not parse, properties CSS does not have,
// and values that do not match their property's syntax (values that use
// var() cannot be matched before the variables are known, and are taken
// as they are).
'use strict';
var fs = require('fs');
var csstree = require('css-tree');

var file = process.argv[2];
var text = fs.readFileSync(file, 'utf8');
var report = { rules: 0, declarations: 0, errors: [] };

function where(node) {
  return 'line ' + (node.loc ? node.loc.start.line : '?') + ': ';
}

var ast = csstree.parse(text, {
  positions: true,
  onParseError: function (error) {
    report.errors.push('line ' + error.line + ': ' + error.formattedMessage);
  }
});

function usesVar(node) {
  var found = false;
  csstree.walk(node, function (child) {
    if (child.type === 'Function' && child.name.toLowerCase() === 'var') {
      found = true;
    }
  });
  return found;
}

csstree.walk(ast, function (node) {
  if (node.type === 'Rule') report.rules += 1;
  if (node.type !== 'Declaration') return;
  report.declarations += 1;
  if (node.property.indexOf('--') === 0) return;
  if (node.value.type === 'Raw') {
    report.errors.push(where(node) + node.property + ': cannot parse ' +
      JSON.stringify(node.value.value));
    return;
  }
  if (usesVar(node.value)) return;
  var match = csstree.lexer.matchDeclaration(node);
  if (match.error) {
    report.errors.push(where(node) + node.property + ': ' +
      match.error.message);
  }
});

process.stdout.write(JSON.stringify(report) + '\n');
