// memprof-report --format=html: the page's script.  Loaded by
// lua/memprof/report/html.lua and written inline at the end of every
// page, after the element memprof-data, the JSON it draws.

// formatting and small helpers --------------------------------------------

'use strict';
var SIZE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

function formatBytes(bytes) {
  var unit = 0, scaled = bytes;
  while (Math.abs(scaled) >= 1024 && unit < SIZE_UNITS.length - 1) {
    scaled /= 1024;
    unit += 1;
  }
  if (unit === 0) return bytes + ' B';
  var size = Math.abs(scaled);
  var decimals = size < 10 ? 2 : size < 100 ? 1 : 0;
  return scaled.toFixed(decimals) + ' ' + SIZE_UNITS[unit];
}

function formatCount(count) {
  return count.toLocaleString('en-US');
}

function formatShare(part, whole) {
  if (!whole) return '0%';
  var value = part / whole * 100;
  if (value !== 0 && Math.abs(value) < 0.1) return '<0.1%';
  return value.toFixed(1) + '%';
}

function formatTime(ns) {
  if (ns === 0) return '0 ms';
  var unit = 1e3, name = '\u00b5s';
  if (ns >= 1e9) { unit = 1e9; name = 's'; }
  else if (ns >= 1e6) { unit = 1e6; name = 'ms'; }
  var scaled = ns / unit;
  return scaled.toFixed(scaled < 10 ? 2 : scaled < 100 ? 1 : 0) + ' ' + name;
}

function element(tag, className, text) {
  var node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// A small string hash, to vary the colours of neighbouring frames.
function hashText(text) {
  var hash = 0;
  for (var i = 0; i < text.length; i++) {
    hash = (hash * 31 + text.charCodeAt(i)) | 0;
  }
  return Math.abs(hash);
}

var SOURCE_HUES = {
  lua: [28, 85, 58], c: [205, 70, 62], trace: [140, 50, 55],
  internal: [220, 10, 70], before: [220, 10, 70], root: [220, 12, 82],
  other: [220, 8, 78]
};

function frameColour(name, source) {
  var hue = SOURCE_HUES[source] || SOURCE_HUES.lua;
  var hash = hashText(name);
  var shift = (hash % 17) - 8;
  var light = hue[2] + (hash >> 5) % 14;
  return 'hsl(' + (hue[0] + shift) + ',' + hue[1] + '%,' + light + '%)';
}

// the tooltip -------------------------------------------------------------

// One tooltip for the whole page, placed near the pointer or an element.
function Tooltip(node) {
  this.node = node;
}

Tooltip.prototype.show = function (title, lines, x, y) {
  var node = this.node;
  node.textContent = '';
  node.appendChild(element('div', 'tip-name', title));
  lines.forEach(function (line) {
    node.appendChild(element('div', 'tip-row', line));
  });
  node.hidden = false;
  var width = node.offsetWidth, height = node.offsetHeight;
  var left = Math.min(x + 14, window.innerWidth - width - 8);
  var top = y + 16;
  if (top + height > window.innerHeight - 8) top = y - height - 12;
  node.style.left = Math.max(8, left) + 'px';
  node.style.top = Math.max(8, top) + 'px';
};

Tooltip.prototype.showAt = function (target, title, lines) {
  var box = target.getBoundingClientRect();
  this.show(title, lines, box.left, box.bottom - 10);
};

Tooltip.prototype.hide = function () {
  this.node.hidden = true;
};

// flame graphs ------------------------------------------------------------

var ROW_HEIGHT = 20;
// Frames narrower than this share of the zoomed frame are not drawn on
// their own: the siblings that are are merged into one "other" box.
var MIN_SHARE = 0.0008;

// The name of a box that stands for `count` frames.
function otherName(count) {
  return 'other (' + formatCount(count) + (count === 1 ? ' frame)' :
    ' frames)');
}

// Gives every node its parent, depth, name, source and offset (bytes
// before it on its row), so that any node can become the zoomed one.
function prepareTree(root, frames, rootName) {
  var stack = [root];
  root.parent = null;
  root.depth = 0;
  root.x = 0;
  root.name = rootName;
  root.source = 'root';
  while (stack.length) {
    var node = stack.pop();
    var offset = node.x;
    (node.c || []).forEach(function (child) {
      child.parent = node;
      child.depth = node.depth + 1;
      child.x = offset;
      if (child.o) {
        // Frames merged when the page was made (too many to keep).
        child.name = otherName(child.o);
        child.source = 'other';
      } else {
        child.name = frames[child.f].name;
        child.source = frames[child.f].source;
      }
      offset += child.b;
      stack.push(child);
    });
  }
  return root;
}

function FlameGraph(name, graph, frames, tooltip) {
  this.name = name;
  this.graph = graph;
  this.root = prepareTree(graph.root, frames, graph.root_name);
  this.zoomed = this.root;
  this.query = '';
  this.tooltip = tooltip;
  this.box = document.getElementById('flame-' + name);
  this.bar = document.getElementById('bar-' + name);
  this.nodes = [];
  this.buildBar();
  this.listen();
}

FlameGraph.prototype.buildBar = function () {
  this.crumbs = element('div', 'crumbs');
  this.crumbs.setAttribute('aria-label', 'Zoom path');
  this.resetButton = element('button', 'reset', 'Reset zoom');
  this.resetButton.type = 'button';
  this.matched = element('span', 'matched');
  this.matched.setAttribute('aria-live', 'polite');
  this.bar.appendChild(this.resetButton);
  this.bar.appendChild(this.crumbs);
  this.bar.appendChild(this.matched);
  var self = this;
  this.resetButton.addEventListener('click', function () {
    self.zoom(self.root);
  });
};

FlameGraph.prototype.listen = function () {
  var self = this;
  var box = this.box;
  function nodeOf(event) {
    var target = event.target.closest('.frame');
    if (!target) return null;
    return { element: target, node: self.nodes[target.dataset.index] };
  }
  box.addEventListener('click', function (event) {
    var hit = nodeOf(event);
    if (hit) self.zoom(self.zoomTarget(hit.node), true);
  });
  box.addEventListener('keydown', function (event) {
    var hit = nodeOf(event);
    if (hit && (event.key === 'Enter' || event.key === ' ')) {
      event.preventDefault();
      self.zoom(self.zoomTarget(hit.node), true);
    }
  });
  box.addEventListener('mousemove', function (event) {
    var hit = nodeOf(event);
    if (hit) self.describe(hit.node, event.clientX, event.clientY);
    else self.tooltip.hide();
  });
  box.addEventListener('mouseleave', function () { self.tooltip.hide(); });
  box.addEventListener('focusin', function (event) {
    var hit = nodeOf(event);
    if (hit) {
      var rect = hit.element.getBoundingClientRect();
      self.describe(hit.node, rect.left, rect.bottom - 10);
    }
  });
  box.addEventListener('focusout', function () { self.tooltip.hide(); });
};

// Where a click on a frame zooms: the frame, or for an "other" box the
// frame it hangs from, which widens the frames merged in it.
FlameGraph.prototype.zoomTarget = function (node) {
  return node.source === 'other' ? node.parent : node;
};

FlameGraph.prototype.describe = function (node, x, y) {
  var root = this.root, zoomed = this.zoomed;
  var lines = [
    formatBytes(node.b) + ' (' + formatCount(node.b) + ' bytes)',
    formatCount(node.n) + ' ' + this.graph.counted,
    formatShare(node.b, root.b) + ' of all'
  ];
  if (zoomed !== root && node.depth > zoomed.depth) {
    lines[2] += ', ' + formatShare(node.b, zoomed.b) + ' of ' + zoomed.name;
  }
  if (node.source === 'other') {
    lines.push(node.merged ? 'each too small to draw at this zoom' :
      'merged when the page was made, to keep it light');
  }
  this.tooltip.show(node.name, lines, x, y);
};

FlameGraph.prototype.zoom = function (node, keepFocus) {
  this.zoomed = node;
  this.render();
  if (keepFocus) {
    var index = this.nodes.indexOf(node);
    var target = this.box.querySelector('[data-index="' + index + '"]');
    if (target) target.focus({ preventScroll: true });
  }
};

// The children of `node` to draw below it: those at least MIN_SHARE of
// the zoomed node wide, then the others merged into one "other" box
// (children come largest first, so the narrow ones are the last, side by
// side), drawn when it is wide enough itself.
function drawnChildren(node, zoomed) {
  var drawn = [], other = null;
  (node.c || []).forEach(function (child) {
    if (zoomed.b && child.b / zoomed.b >= MIN_SHARE) {
      drawn.push(child);
      return;
    }
    if (!other) {
      other = { source: 'other', merged: true, b: 0, n: 0, o: 0, x: child.x,
        parent: node, depth: node.depth + 1 };
    }
    other.b += child.b;
    other.n += child.n;
    other.o += child.o || 1;
  });
  if (other && zoomed.b && other.b / zoomed.b >= MIN_SHARE) {
    other.name = otherName(other.o);
    drawn.push(other);
  }
  return drawn;
}

// The nodes to draw: the ancestors of the zoomed node, it, and its
// descendants wide enough to see, with "other" boxes for the rest.
FlameGraph.prototype.visible = function () {
  var zoomed = this.zoomed, list = [];
  for (var up = zoomed.parent; up; up = up.parent) {
    list.push({ node: up, left: 0, width: 1, ancestor: true });
  }
  list.reverse();
  var stack = [zoomed];
  while (stack.length) {
    var node = stack.pop();
    var width = zoomed.b ? node.b / zoomed.b : 0;
    list.push({ node: node, left: zoomed.b ? (node.x - zoomed.x) / zoomed.b : 0,
      width: width || 1, ancestor: false });
    // Pushed right to left, so that frames come in reading order.
    var children = drawnChildren(node, zoomed);
    for (var i = children.length - 1; i >= 0; i--) stack.push(children[i]);
  }
  return list;
};

// The width of a character of the frames' monospace font, measured once.
var charWidth = 0;
function frameCharWidth(box) {
  if (!charWidth) {
    var probe = element('span', 'frame', '0000000000');
    probe.style.visibility = 'hidden';
    probe.style.padding = '0';
    box.appendChild(probe);
    charWidth = probe.getBoundingClientRect().width / 10;
    box.removeChild(probe);
  }
  return charWidth;
}

// A frame's label in `px` pixels: the name, or when it does not fit, its
// end after an ellipsis, so that a place keeps its file:line
// ('\u2026parser.lua:230', where the CSS ellipsis would keep '@\u2026/sh').
// Without a width (a hidden tab) the name, cut by the CSS.
function fittedLabel(text, px, char) {
  if (!px || !char) return text;
  var fits = Math.floor((px - 9) / char);
  if (text.length <= fits) return text;
  if (fits < 3) return '';
  return '\u2026' + text.slice(text.length - (fits - 1));
}

FlameGraph.prototype.frameElement = function (item, index, px, char) {
  var node = item.node;
  var label = node.source === 'root' ?
    node.name + ': ' + formatBytes(node.b) : node.name;
  label = fittedLabel(label, item.width * px, char);
  var div = element('div', 'frame' + (item.ancestor ? ' ancestor' : '') +
    (node.source === 'other' ? ' other' : ''), label);
  div.style.left = (item.left * 100).toFixed(4) + '%';
  div.style.width = (item.width * 100).toFixed(4) + '%';
  div.style.top = (node.depth * ROW_HEIGHT) + 'px';
  div.style.background = frameColour(node.name, node.source);
  div.dataset.index = index;
  div.dataset.name = node.name;
  div.setAttribute('role', 'button');
  div.setAttribute('aria-label', node.name + ': ' + formatBytes(node.b) +
    ', ' + formatShare(node.b, this.root.b));
  // Only frames wide enough for a label take part in the tab order.
  div.tabIndex = item.width >= 0.04 ? 0 : -1;
  if (this.query && matches(node, this.query)) div.classList.add('match');
  return div;
};

FlameGraph.prototype.render = function () {
  var items = this.visible();
  var box = this.box, depth = 0;
  var fragment = document.createDocumentFragment();
  var px = box.clientWidth, char = px ? frameCharWidth(box) : 0;
  this.nodes = items.map(function (item) { return item.node; });
  items.forEach(function (item, index) {
    depth = Math.max(depth, item.node.depth);
    fragment.appendChild(this.frameElement(item, index, px, char));
  }, this);
  box.textContent = '';
  box.appendChild(fragment);
  box.style.height = ((depth + 1) * ROW_HEIGHT + 2) + 'px';
  box.classList.toggle('searching', this.query !== '');
  this.renderBar();
  if (!this.root.b) {
    box.textContent = '';
    box.style.height = 'auto';
    box.appendChild(element('p', 'empty', 'No bytes to show.'));
  }
};

FlameGraph.prototype.renderBar = function () {
  var self = this, path = [];
  for (var node = this.zoomed; node; node = node.parent) path.unshift(node);
  this.crumbs.textContent = '';
  path.forEach(function (node, i) {
    if (i > 0) self.crumbs.appendChild(element('span', 'sep', '\u203a'));
    if (node === self.zoomed) {
      self.crumbs.appendChild(element('span', 'current', node.name));
    } else {
      var button = element('button', '', node.name);
      button.type = 'button';
      button.addEventListener('click', function () { self.zoom(node); });
      self.crumbs.appendChild(button);
    }
  });
  this.resetButton.disabled = this.zoomed === this.root;
  this.matched.textContent = this.query ? matchedText(this) : '';
};

// search ------------------------------------------------------------------

function matches(node, query) {
  return node.source !== 'root' && node.source !== 'other' &&
    node.name.toLowerCase().indexOf(query) !== -1;
}

// Bytes of the frames matching the query, each counted once: a match
// inside a match adds nothing.
function matchedBytes(root, query) {
  var total = 0, stack = [root];
  while (stack.length) {
    var node = stack.pop();
    if (matches(node, query)) {
      total += node.b;
      continue;
    }
    (node.c || []).forEach(function (child) { stack.push(child); });
  }
  return total;
}

function matchedText(graph) {
  var bytes = matchedBytes(graph.root, graph.query);
  return 'Matched: ' + formatBytes(bytes) + ' (' +
    formatShare(bytes, graph.root.b) + ')';
}

// the heap over time ------------------------------------------------------

// Hover and arrow keys on the heap-over-time chart.
function HeapChart(timeline, tooltip) {
  this.rows = timeline.rows;
  this.plot = timeline.plot;
  this.peakRow = timeline.peak_row;
  this.tooltip = tooltip;
  this.svg = document.getElementById('chart-svg');
  this.guide = document.getElementById('chart-guide');
  this.current = -1;
  this.listen();
}

HeapChart.prototype.rowAt = function (clientX) {
  var box = this.svg.getBoundingClientRect();
  var scale = this.plot.width / box.width;
  var x = (clientX - box.left) * scale - this.plot.left;
  var plotWidth = this.plot.width - this.plot.left - this.plot.right;
  var index = Math.floor(x / plotWidth * this.rows.length);
  return Math.max(0, Math.min(this.rows.length - 1, index));
};

HeapChart.prototype.show = function (index, clientX, clientY) {
  var row = this.rows[index];
  var plotWidth = this.plot.width - this.plot.left - this.plot.right;
  var x = this.plot.left + (index + 0.5) / this.rows.length * plotWidth;
  this.current = index;
  this.guide.setAttribute('x1', x);
  this.guide.setAttribute('x2', x);
  this.guide.setAttribute('visibility', 'visible');
  var title = formatTime(row[0]) + ' \u2013 ' + formatTime(row[1]);
  var lines = [
    'highest: ' + formatBytes(row[2]) + ', at the end: ' + formatBytes(row[3]),
    formatCount(row[4]) + ' events'
  ];
  if (index === this.peakRow) lines.push('the peak');
  if (clientX === undefined) {
    var box = this.svg.getBoundingClientRect();
    clientX = box.left + x * box.width / this.plot.width;
    clientY = box.top + box.height / 3;
  }
  this.tooltip.show(title, lines, clientX, clientY);
};

HeapChart.prototype.hide = function () {
  this.guide.setAttribute('visibility', 'hidden');
  this.tooltip.hide();
};

HeapChart.prototype.listen = function () {
  var self = this, svg = this.svg;
  svg.addEventListener('mousemove', function (event) {
    self.show(self.rowAt(event.clientX), event.clientX, event.clientY);
  });
  svg.addEventListener('mouseleave', function () { self.hide(); });
  svg.addEventListener('blur', function () { self.hide(); });
  svg.addEventListener('keydown', function (event) {
    var step = { ArrowLeft: -1, ArrowRight: 1 }[event.key];
    if (event.key === 'Home') self.show(0);
    else if (event.key === 'End') self.show(self.rows.length - 1);
    else if (event.key === 'p') self.show(self.peakRow);
    else if (step) {
      var start = self.current < 0 ? self.peakRow : self.current + step;
      self.show(Math.max(0, Math.min(self.rows.length - 1, start)));
    } else return;
    event.preventDefault();
  });
};

// start -------------------------------------------------------------------

function selectTab(graphs, name) {
  Object.keys(graphs).forEach(function (key) {
    var tab = document.getElementById('tab-' + key);
    var selected = key === name;
    tab.setAttribute('aria-selected', String(selected));
    tab.tabIndex = selected ? 0 : -1;
    document.getElementById('panel-' + key).hidden = !selected;
  });
  // Labels are fitted to the frames' widths, known once the panel shows.
  graphs[name].render();
}

function listenToTabs(graphs) {
  var names = Object.keys(graphs);
  names.forEach(function (name, i) {
    var tab = document.getElementById('tab-' + name);
    tab.addEventListener('click', function () { selectTab(graphs, name); });
    tab.addEventListener('keydown', function (event) {
      var step = { ArrowLeft: -1, ArrowRight: 1 }[event.key];
      if (!step) return;
      var next = names[(i + step + names.length) % names.length];
      selectTab(graphs, next);
      document.getElementById('tab-' + next).focus();
    });
  });
}

function listenToSearch(graphs) {
  var input = document.getElementById('flame-search');
  input.addEventListener('input', function () {
    var query = input.value.trim().toLowerCase();
    Object.keys(graphs).forEach(function (name) {
      graphs[name].query = query;
      graphs[name].render();
    });
  });
  document.addEventListener('keydown', function (event) {
    var typing = event.target.tagName === 'INPUT';
    if (event.key === '/' && !typing) {
      event.preventDefault();
      input.focus();
    } else if (event.key === 'Escape') {
      if (typing && input.value) {
        input.value = '';
        input.dispatchEvent(new Event('input'));
        return;
      }
      Object.keys(graphs).forEach(function (name) {
        var graph = graphs[name];
        if (graph.zoomed.parent) graph.zoom(graph.zoomed.parent);
      });
    }
  });
}

function start() {
  var data = JSON.parse(document.getElementById('memprof-data').textContent);
  var tooltip = new Tooltip(document.getElementById('tooltip'));
  var graphs = {};
  ['allocated', 'live'].forEach(function (name) {
    graphs[name] = new FlameGraph(name, data.graphs[name], data.frames,
      tooltip);
    graphs[name].render();
  });
  listenToTabs(graphs);
  listenToSearch(graphs);
  if (data.timeline) new HeapChart(data.timeline, tooltip);
  document.body.dataset.ready = 'true';
}

start();
