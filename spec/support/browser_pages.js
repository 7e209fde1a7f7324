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
const {spawn} = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const binary = process.argv[2];
const jobs = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'memprof-pages-'));
// The flags the specs ran `chromium --dump-dom` with (consumers.lua).
const chrome = spawn(binary, ['--headless', '--no-sandbox', '--disable-gpu',
  '--disable-background-networking', '--disable-component-update',
  '--disable-sync', '--no-first-run', '--hide-scrollbars',
  '--run-all-compositor-stages-before-draw', '--remote-debugging-pipe',
  '--user-data-dir=' + dir, 'about:blank'],
{stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'], detached: true});
const toChrome = chrome.stdio[3];
const fromChrome = chrome.stdio[4];
let lastId = 0;
let pending = '';
const waiting = new Map();
// Events by session: the listener of the page being opened.
const listeners = new Map();
fromChrome.on('data', (data) => {
  pending += data.toString();
  for (let at = pending.indexOf('\0'); at >= 0; at = pending.indexOf('\0')) {
    const message = JSON.parse(pending.slice(0, at));
    pending = pending.slice(at + 1);
    const done = waiting.get(message.id);
    if (done) {
      waiting.delete(message.id);
      done(message);
    } else if (message.method && listeners.has(message.sessionId)) {
      listeners.get(message.sessionId)(message);
    }
  }
});

function send(method, params, sessionId) {
  const message = {id: ++lastId, method, params: params || {}};
  if (sessionId) message.sessionId = sessionId;
  toChrome.write(JSON.stringify(message) + '\0');
  return new Promise((resolve, reject) => waiting.set(message.id,
    (reply) => reply.error ?
      reject(new Error(method + ': ' + JSON.stringify(reply.error))) :
      resolve(reply.result)));
}

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
  listeners.set(sessionId, (message) => {
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
  const page = await tab();
  const results = [];
  for (const job of jobs) results.push(await open(page, job));
  finish(0, JSON.stringify(results));
})().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  finish(1);
});
