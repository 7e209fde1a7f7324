// A headless Chromium driven through the DevTools protocol on a pipe
// (--remote-debugging-pipe), for the specs' node scripts
// (browser_pages.js, heapsnapshot_devtools.js). The browser runs in a
// process group of its own with a directory of its own (its profile and
// its temporary files); finish() ends the one and removes the other.
//
//   const browser = require('./chromium_pipe').start(BINARY, FLAGS, NAME);
//   const result = await browser.send(method, params, sessionId);
//   browser.listen(sessionId, (message) => ...);  // its events
//   browser.finish(code, output);                 // exits this process
const {spawn} = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

function start(binary, flags, name) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'memprof-' + name + '-'));
  const chrome = spawn(binary, ['--headless', '--no-sandbox', '--disable-gpu',
    '--disable-background-networking', '--disable-component-update',
    '--no-first-run', ...flags, '--remote-debugging-pipe',
    '--user-data-dir=' + dir, 'about:blank'],
  // TMPDIR: its singleton socket's directory, which a killed browser
  // leaves behind, goes into the profile directory finish() removes.
  {stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'], detached: true,
    env: {...process.env, TMPDIR: dir}});
  const toChrome = chrome.stdio[3];
  let lastId = 0;
  let pending = '';
  const waiting = new Map();
  // Events by session.
  const listeners = new Map();
  chrome.stdio[4].on('data', (data) => {
    pending += data.toString();
    for (let at = pending.indexOf('\0'); at >= 0;
      at = pending.indexOf('\0')) {
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

  // The reply's result; an error reply rejects, naming the method.
  function send(method, params, sessionId) {
    const message = {id: ++lastId, method, params: params || {}};
    if (sessionId) message.sessionId = sessionId;
    toChrome.write(JSON.stringify(message) + '\0');
    return new Promise((resolve, reject) => waiting.set(message.id,
      (reply) => reply.error ?
        reject(new Error(method + ': ' + JSON.stringify(reply.error))) :
        resolve(reply.result)));
  }

  function listen(sessionId, listener) {
    listeners.set(sessionId, listener);
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

  return {send, listen, finish};
}

module.exports = {start};
