// Checks a memprof HTML page from inside the browser.
//
// spec/helpers/consumers.lua (browser_pages) appends this script (after the
// page's own) to a copy of a page, opens it in headless Chromium
// (spec/support/browser_pages.js) and reads what it found from the element
// "memprof-check" this script adds at the end of the body: the JSON of
// `report` below.
// window.MEMPROF_CHECK, set just before, says which frame to zoom
// into and what to search for.  The checks work the page the way a
// person would: clicks, keys, the pointer and the search box; every step
// that throws, and every error the page reports while it runs, lands in
// report.errors.
(function () {
  'use strict';
  var config = window.MEMPROF_CHECK || {};
  var report = { errors: [] };

  window.addEventListener('error', function (event) {
    report.errors.push('page error: ' + event.message);
  });

  function step(name, check) {
    try {
      report[name] = check();
    } catch (error) {
      report.errors.push(name + ': ' + error.message);
    }
  }

  function frames(graph) {
    return Array.prototype.slice.call(
      document.querySelectorAll('#flame-' + graph + ' .frame'));
  }

  function frameNames(graph) {
    return frames(graph).map(function (frame) { return frame.dataset.name; });
  }

  // The drawn frame of `name` in `graph` that is not an ancestor.
  function frameNamed(graph, name) {
    return frames(graph).filter(function (frame) {
      return frame.dataset.name === name &&
        !frame.classList.contains('ancestor');
    })[0];
  }

  function pointer(type, target) {
    var box = target.getBoundingClientRect();
    target.dispatchEvent(new MouseEvent(type, {
      bubbles: true, clientX: box.left + box.width / 2,
      clientY: box.top + box.height / 2
    }));
  }

  function key(target, name) {
    target.dispatchEvent(new KeyboardEvent('keydown',
      { key: name, bubbles: true }));
  }

  function tooltip() {
    var node = document.getElementById('tooltip');
    return node.hidden ? null : node.textContent;
  }

  function crumbs(graph) {
    return document.querySelector('#bar-' + graph + ' .crumbs').textContent;
  }

  function resetButton(graph) {
    return document.querySelector('#bar-' + graph + ' .reset');
  }

  step('ready', function () { return document.body.dataset.ready === 'true'; });
  step('resources', function () {
    return performance.getEntriesByType('resource').map(function (entry) {
      return entry.name;
    });
  });
  step('frames', function () {
    return { allocated: frameNames('allocated'), live: frameNames('live') };
  });
  // Each drawn frame of the allocated graph: its name, the label shown,
  // and whether the label fits its box (no CSS ellipsis).
  step('labels', function () {
    return frames('allocated').map(function (frame) {
      return [frame.dataset.name, frame.textContent,
        frame.scrollWidth <= frame.clientWidth];
    });
  });
  step('peak_marker', function () {
    var marker = document.getElementById('peak-marker');
    return marker ? marker.textContent : null;
  });
  step('table_rows', function () {
    var rows = {};
    ['allocated', 'live', 'peak', 'temporary'].forEach(function (name) {
      var table = '#table-' + name + ' tbody tr';
      rows[name] = document.querySelectorAll(table).length;
    });
    return rows;
  });

  step('hover', function () {
    var frame = frameNamed('allocated', config.zoom);
    pointer('mousemove', frame);
    var text = tooltip();
    pointer('mouseleave', document.getElementById('flame-allocated'));
    return text;
  });

  step('zoom', function () {
    var before = frames('allocated').length;
    frameNamed('allocated', config.zoom).click();
    var zoomed = frameNamed('allocated', config.zoom);
    var result = {
      crumbs: crumbs('allocated'),
      width: zoomed.style.width,
      left: zoomed.style.left,
      reset_enabled: !resetButton('allocated').disabled
    };
    resetButton('allocated').click();
    result.after_reset = {
      crumbs: crumbs('allocated'),
      frames: frames('allocated').length === before,
      reset_enabled: !resetButton('allocated').disabled
    };
    return result;
  });

  // Enter zooms into the focused frame; each Escape zooms out a level.
  step('keyboard', function () {
    var frame = frameNamed('allocated', config.zoom);
    frame.focus();
    key(frame, 'Enter');
    var result = { zoomed: crumbs('allocated'), escapes: [] };
    for (var i = 0; i < 5 && !resetButton('allocated').disabled; i++) {
      key(document.body, 'Escape');
      result.escapes.push(crumbs('allocated'));
    }
    return result;
  });

  step('search', function () {
    var input = document.getElementById('flame-search');
    input.value = config.search;
    input.dispatchEvent(new Event('input', { bubbles: true }));
    var matched = frames('allocated').filter(function (frame) {
      return frame.classList.contains('match');
    }).map(function (frame) { return frame.dataset.name; });
    var result = {
      matched: matched,
      text: document.querySelector('#bar-allocated .matched').textContent
    };
    input.value = '';
    input.dispatchEvent(new Event('input', { bubbles: true }));
    result.cleared = document.querySelectorAll('.frame.match').length === 0;
    return result;
  });

  step('tabs', function () {
    document.getElementById('tab-live').click();
    var result = {
      live_shown: !document.getElementById('panel-live').hidden,
      allocated_hidden: document.getElementById('panel-allocated').hidden
    };
    document.getElementById('tab-allocated').click();
    result.back = !document.getElementById('panel-allocated').hidden;
    return result;
  });

  step('chart', function () {
    var overlay = document.getElementById('chart-overlay');
    if (!overlay) return null;
    pointer('mousemove', overlay);
    var result = {
      tooltip: tooltip(),
      guide: document.getElementById('chart-guide').getAttribute('visibility')
    };
    var svg = document.getElementById('chart-svg');
    svg.focus();
    key(svg, 'p');
    result.peak_key = tooltip();
    pointer('mouseleave', svg);
    return result;
  });

  // config.other: the name of an "other" box of the allocated graph to
  // hover and click (which zooms into the frame it hangs from).
  if (config.other) {
    step('other', function () {
      var box = frameNamed('allocated', config.other);
      pointer('mousemove', box);
      var result = {
        left: box.style.left, width: box.style.width, tooltip: tooltip()
      };
      pointer('mouseleave', document.getElementById('flame-allocated'));
      box.click();
      result.crumbs = crumbs('allocated');
      result.frames = frameNames('allocated');
      resetButton('allocated').click();
      return result;
    });
  }

  var out = document.createElement('pre');
  out.id = 'memprof-check';
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
})();
