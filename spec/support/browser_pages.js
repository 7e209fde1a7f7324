// Opens HTML pages in one headless Chromium, one after another in one tab,
// through the DevTools protocol (--remote-debugging-pipe): starting the
// browser costs about 3 s of CPU (all its processes), a page a few
// tenths. The pages have no timers: their scripts run as they load, so
// the load event ends a page (nothing is left for the virtual time that
// `chromium --dump-dom` was run with). For each page: what its
// scripts wrote to the console and the exceptions nobody caught (as
// Chromium logs them: "Uncaught TypeError: ..."), the text of the element
// of id "memprof-check" once the page has loaded (spec/support/
// html_check.js writes it) and, when asked, a PNG of the window.
//
//   node browser_pages.js CHROMIUM JOBS.json
//
// JOBS.json: [{path, screenshot (a PNG to write, or null), width and
// height (of the page's window; by default the tab's own)}].
// Prints a JSON list, a result per job: {check (string or null), console
// (list of lines), loaded (boolean)}.
const fs = require('fs');
const chromium = require('./chromium_pipe');

const jobs = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
// The flags the specs ran `chromium --dump-dom` with (consumers.lua).
const {send, listen, finish} = chromium.start(process.argv[2],
  ['--disable-sync', '--hide-scrollbars',
    '--run-all-compositor-stages-before-draw'], 'pages');

// A console call's arguments as one line (strings as they are).
function consoleLine(params) {
  return 'CONSOLE ' + params.type + ': ' + params.args.map((arg) =>
    arg.value !== undefined ? String(arg.value) :
      arg.description || arg.type).join(' ');
}

// An uncaught exception as Chromium logs it ("Uncaught ReferenceError:
// x is not defined"), with where it was thrown.
function exceptionLine(details) {
  const thrown = details.exception && details.exception.description;
  return (thrown ? details.text + ' ' + thrown : details.text) +
    ' (line ' + (details.lineNumber + 1) + ')';
}

// The tab the pages open in, one after another (one renderer process for
// them all): its session and a function that takes its events.
async function tab() {
  const target = await send('Target.createTarget', {url: 'about:blank'});
  const {sessionId} = await send('Target.attachToTarget',
    {targetId: target.targetId, flatten: true});
  const page = {sessionId, result: null, loaded: null};
  listen(sessionId, (message) => {
    const params = message.params;
    const result = page.result;
    if (!result) return;
    if (message.method === 'Runtime.consoleAPICalled') {
      result.console.push(consoleLine(params));
    } else if (message.method === 'Runtime.exceptionThrown') {
      result.console.push(exceptionLine(params.exceptionDetails));
    } else if (message.method === 'Log.entryAdded' &&
        params.entry.level !== 'verbose') {
      result.console.push('LOG ' + params.entry.level + ': ' +
        params.entry.text);
    } else if (message.method === 'Page.loadEventFired' && page.loaded) {
      page.loaded();
    }
  });
  await send('Page.enable', {}, sessionId);
  await send('Runtime.enable', {}, sessionId);
  await send('Log.enable', {}, sessionId);
  return page;
}

async function open(page, job) {
  const sessionId = page.sessionId;
  const result = {console: [], loaded: false, check: null};
  if (job.width) {
    await send('Emulation.setDeviceMetricsOverride', {width: job.width,
      height: job.height, deviceScaleFactor: 1, mobile: false}, sessionId);
  } else {
    await send('Emulation.clearDeviceMetricsOverride', {}, sessionId);
  }
  const load = new Promise((resolve) => {
    page.loaded = resolve;
  });
  page.result = result;
  await send('Page.navigate', {url: 'file://' + job.path}, sessionId);
  await load;
  result.loaded = true;
  const check = await send('Runtime.evaluate', {returnByValue: true,
    expression: '(function () { var node = document.getElementById(' +
      '"memprof-check"); return node ? node.textContent : null; })()'},
  sessionId);
  result.check = check.result.value;
  if (job.screenshot) {
    const shot = await send('Page.captureScreenshot', {format: 'png'},
      sessionId);
    fs.writeFileSync(job.screenshot, Buffer.from(shot.data, 'base64'));
  }
  page.result = null;
  page.loaded = null;
  return result;
}

(async () => {
  const page = await tab();
  const results = [];
  for (const job of jobs) results.push(await open(page, job));
  finish(0, JSON.stringify(results));
})().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  finish(1);
});
