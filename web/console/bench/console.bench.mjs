// The web console's benchmark (issue 19): run by bench/benches/console.rs
// (`cargo bench -p bothy-host --bench console --features test-seams`, or
// `npm run bench` here), which starts the real server (release) with a real
// bothy-host under supervise and a real session user, and answers this
// script's questions in lines ("TOTP_NOW?" -> "TOTP <code>"). Figures go out
// as "FIGURE name: value unit", one per line; everything else is progress.
//
// In a real headless Chromium (Debian's /usr/bin/chromium, playwright-core):
// - Throughput: a file of 16 MiB of random bytes in base64 (76 characters a
//   line, as `head -c 16M /dev/urandom | base64` writes it) is `cat` in the
//   shell; from the Enter that starts it to its end painted, in
//   MiB/s of the bytes the terminal got (the PTY writes \r\n). Beside it, in
//   the same page and run, the same bytes written into an xterm.js Terminal
//   of the same size and options from memory (64 KiB writes), until the last
//   write is parsed and the next frame painted. Five runs each, alternating,
//   the median (on this 2-core machine single runs spread by a third).
//   With each, the animation frames the page ran per second meanwhile (a
//   frame is where the terminal paints; D-711).
// - Keystroke echo: keydown in the tab -> the echoed glyph painted in the
//   terminal's rows (the PTY's echo at `cat > /dev/null`), 300 samples after
//   30; p50 and p99.
// - Open: the click on Open -> the first glyph of the shell painted, and the
//   same from the end of the passkey step-up (its response), median of five.
//
// With BOTHY_CONSOLE_PROFILE set, the page's thread is sampled (DevTools'
// Profiler, every 100 µs) during the first tab burst and the first write from
// memory, and the self time of the top functions goes to stderr as
// "PROFILE tab|memory: <ms> <share> <function> <file>:<line>:<column>"; the figures of
// such a run carry the sampler's cost.
//
// With BOTHY_CONSOLE_CPU set, every thread of the machine is accounted over
// the five tab bursts and the five writes from memory: the CPU it ran and
// the time it waited runnable for a core, to stderr as
// "CPU tab|memory: <ms> run <ms> waited <process>[<chromium kind>] <thread>"
// (the page's thread is "chromium[renderer] chromium", the stream worker
// "chromium[renderer] DedicatedWorker"; D-726).
//
// The tab is not instrumented (docs/decisions.md D-701): Playwright only
// launches the browser. The page lives in a browser context that Playwright
// does not know, so it never enables DevTools' Network domain there (which
// copies every WebSocket frame's payload to the driver and cost the tab a
// third of its throughput); this script drives it over the browser's own
// DevTools session with the few calls it needs (RawPage below): evaluate,
// mouse clicks at an element's centre and key events, as Playwright would.
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { createInterface } from "node:readline";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const port = Number(env("E2E_PORT"));
const owner = env("E2E_OWNER");
const ownerPassword = env("E2E_OWNER_PASSWORD");
const figure = (name, value, unit) => console.log(`FIGURE ${name}: ${value} ${unit}`);
const step = (name) => console.log(`STEP ${name}`);
const lines = createInterface({ input: process.stdin });
const waiting = [];
lines.on("line", (line) => waiting.shift()?.(line));
const ask = (question) =>
  new Promise((resolve) => {
    waiting.push(resolve);
    console.log(question);
  });
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const quantile = (values, q) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)];
};

// The browser reaches the server as https://localhost, the origin of its
// public_url (WebAuthn and the device stream's Origin check): the server
// listens on 443 itself (bench/benches/console.rs), as a person's browser
// would reach it; no forwarder of this script's own in between (D-719).
if (port !== 443) throw new Error(`the server must listen on 443 (E2E_PORT is ${port})`);
const base = "https://localhost";
const home = mkdtempSync(join(tmpdir(), "bothy-console-bench-"));
const nss = join(home, ".pki", "nssdb");
mkdirSync(nss, { recursive: true });
execFileSync("certutil", ["-N", "--empty-password", "-d", `sql:${nss}`]);
execFileSync("certutil", ["-A", "-t", "C,,", "-n", "bothy-test-ca", "-i", env("E2E_CA"), "-d", `sql:${nss}`]);

// The burst: 16 MiB of random bytes in base64, readable by the session user.
const burstDir = mkdtempSync(join(tmpdir(), "bothy-console-burst-"));
chmodSync(burstDir, 0o755);
const encoded = randomBytes(16 * 1024 * 1024).toString("base64");
const burstLines = [];
for (let at = 0; at < encoded.length; at += 76) burstLines.push(encoded.slice(at, at + 76));
const burst = burstLines.join("\n") + "\n";
const burstFile = join(burstDir, "burst.b64");
writeFileSync(burstFile, burst);
chmodSync(burstFile, 0o644);
// What the terminal receives: the PTY's onlcr makes every \n a \r\n.
const received = burst.replace(/\n/g, "\r\n");
const receivedMiB = received.length / (1024 * 1024);
const BURST_RUNS = 5;

// BOTHY_CONSOLE_PROFILE (the header): self time per function, and the
// runtime's own ("(program)": the browser's native work, GC, idle).
const profiling = process.env.BOTHY_CONSOLE_PROFILE !== undefined;
async function profileStart(page) {
  await page.send("Profiler.enable");
  await page.send("Profiler.setSamplingInterval", { interval: 100 });
  await page.send("Profiler.start");
}
async function profileStop(page, label) {
  const { profile } = await page.send("Profiler.stop");
  const self = new Map();
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  let total = 0;
  profile.samples.forEach((id, i) => {
    const node = byId.get(id);
    const f = node.callFrame;
    const key = `${f.functionName || "(anonymous)"} ${f.url.split("/").pop()}:${f.lineNumber}:${f.columnNumber}`;
    const dt = profile.timeDeltas[i] ?? 0;
    total += dt;
    self.set(key, (self.get(key) ?? 0) + dt);
  });
  const top = [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25);
  process.stderr.write(`PROFILE ${label}: ${(total / 1000).toFixed(1)} ms sampled\n`);
  for (const [key, us] of top) process.stderr.write(`PROFILE ${label}: ${(us / 1000).toFixed(1).padStart(8)} ms ${((100 * us) / total).toFixed(1).padStart(5)}% ${key}\n`);
}

// BOTHY_CONSOLE_CPU (the header): per thread of the machine, from
// /proc/<pid>/task/<tid>/schedstat in nanoseconds, what it ran and how long
// it waited runnable for a core, summed per process kind and thread name;
// a process that ended (a `cat`) counts in its parent's waited-for children.
const cpuAccounting = process.env.BOTHY_CONSOLE_CPU !== undefined;
const cpuTotals = { tab: new Map(), memory: new Map() };
function threadTimes() {
  const out = new Map();
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      // Chromium rewrites its command line as one string: its kind is a word of it.
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      const type = cmdline.match(/--type=([a-z-]+)/)?.[1];
      const subtype = cmdline.match(/--utility-sub-type=([A-Za-z.]+)/)?.[1];
      const kind = readFileSync(`/proc/${pid}/comm`, "utf8").trim() + (type ? `[${subtype ?? type}]` : "");
      // Children that ended and were waited for (a `cat`): clock ticks of 10 ms.
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      out.set(`${pid}/children`, { key: `${kind} (ended children)`, run: (Number(fields[13]) + Number(fields[14])) * 1e7, wait: 0 });
      for (const tid of readdirSync(`/proc/${pid}/task`)) {
        const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").trim().replace(/\d+$/, "#");
        const [run, wait] = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ").map(Number);
        out.set(`${pid}/${tid}`, { key: `${kind} ${name}`, run, wait });
      }
    } catch {
      // Gone meanwhile.
    }
  }
  return out;
}
function cpuSince(before, label) {
  const after = threadTimes();
  const totals = cpuTotals[label];
  for (const [id, now] of after) {
    const then = before.get(id) ?? { run: 0, wait: 0 };
    const t = totals.get(now.key) ?? { run: 0, wait: 0 };
    t.run += now.run - then.run;
    t.wait += now.wait - then.wait;
    totals.set(now.key, t);
  }
}
function cpuReport() {
  for (const label of ["tab", "memory"]) {
    const rows = [...cpuTotals[label].entries()].filter(([, t]) => t.run > 5e6).sort((a, b) => b[1].run - a[1].run);
    const sum = rows.reduce((s, [, t]) => s + t.run, 0);
    process.stderr.write(`CPU ${label}: ${(sum / 1e6).toFixed(0)} ms run in all, over ${BURST_RUNS} runs\n`);
    for (const [key, t] of rows) process.stderr.write(`CPU ${label}: ${(t.run / 1e6).toFixed(0).padStart(6)} ms run ${(t.wait / 1e6).toFixed(0).padStart(6)} ms waited  ${key}\n`);
  }
}

/**
 * A page in a browser context of its own, driven over the browser's DevTools
 * session (Target.sendMessageToTarget), with none of the instrumentation
 * Playwright adds to its own pages.
 */
class RawPage {
  #cdp;
  #session = "";
  #id = 0;
  #pending = new Map();

  static async open(cdp, width, height) {
    const page = new RawPage();
    page.#cdp = cdp;
    const { browserContextId } = await cdp.send("Target.createBrowserContext", { disposeOnDetach: true });
    const { targetId } = await cdp.send("Target.createTarget", { url: "about:blank", browserContextId });
    const { sessionId } = await cdp.send("Target.attachToTarget", { targetId, flatten: false });
    page.#session = sessionId;
    cdp.on("Target.receivedMessageFromTarget", (event) => {
      if (event.sessionId !== page.#session) return;
      const message = JSON.parse(event.message);
      const waiter = message.id === undefined ? undefined : page.#pending.get(message.id);
      if (waiter === undefined) return;
      page.#pending.delete(message.id);
      if (message.error) waiter.reject(new Error(`${waiter.method}: ${message.error.message}`));
      else waiter.resolve(message.result);
    });
    await page.send("Emulation.setDeviceMetricsOverride", { width, height, deviceScaleFactor: 1, mobile: false });
    await page.send("Emulation.setFocusEmulationEnabled", { enabled: true });
    return page;
  }

  send(method, params = {}) {
    this.#id += 1;
    const id = this.#id;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, method });
      this.#cdp.send("Target.sendMessageToTarget", { sessionId: this.#session, message: JSON.stringify({ id, method, params }) }).catch(reject);
    });
  }

  /** Runs `fn(arg)` (or an expression) in the page; awaits a promise; returns the value. */
  async evaluate(fn, arg) {
    const expression = typeof fn === "string" ? fn : `(${fn.toString()})(${arg === undefined ? "" : JSON.stringify(arg)})`;
    const answer = await this.send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true });
    if (answer.exceptionDetails) throw new Error(`evaluate: ${answer.exceptionDetails.exception?.description ?? answer.exceptionDetails.text}`);
    return answer.result.value;
  }

  async goto(url) {
    await this.send("Page.navigate", { url });
    await this.waitForFunction((href) => document.readyState === "complete" && location.href === href, url, { timeout: 30000 });
  }

  waitForTimeout(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  async waitForFunction(fn, arg, { timeout = 30000 } = {}) {
    const deadline = Date.now() + timeout;
    for (;;) {
      if (await this.evaluate(fn, arg)) return;
      if (Date.now() > deadline) throw new Error(`waited ${timeout} ms for ${fn.toString().slice(0, 80)}`);
      await this.waitForTimeout(20);
    }
  }

  /** The element of a CSS selector, with Playwright's `:text('…')` and `text=…` understood. */
  static #finder(selector) {
    const text = selector.match(/^(.*):text\('(.*)'\)$/);
    if (text) return { css: text[1], text: text[2] };
    if (selector.startsWith("text=")) return { css: "button, a", text: selector.slice(5) };
    return { css: selector, text: null };
  }

  waitForSelector(selector, { timeout = 30000 } = {}) {
    const find = RawPage.#finder(selector);
    return this.waitForFunction(
      (f) => Array.from(document.querySelectorAll(f.css)).some((e) => f.text === null || (e.textContent ?? "").trim() === f.text),
      find,
      { timeout },
    );
  }

  async fill(selector, value) {
    await this.waitForSelector(selector);
    await this.evaluate(
      (a) => {
        const input = document.querySelector(a.selector);
        input.focus();
        input.value = a.value;
        input.dispatchEvent(new Event("input", { bubbles: true }));
      },
      { selector, value },
    );
  }

  /** A mouse click at the centre of the element, as Playwright clicks. */
  async click(selector) {
    await this.waitForSelector(selector);
    const find = RawPage.#finder(selector);
    const box = await this.evaluate((f) => {
      const element = Array.from(document.querySelectorAll(f.css)).find((e) => f.text === null || (e.textContent ?? "").trim() === f.text);
      element.scrollIntoView({ block: "center" });
      const r = element.getBoundingClientRect();
      return { x: r.left + r.width / 2, y: r.top + r.height / 2 };
    }, find);
    for (const type of ["mousePressed", "mouseReleased"]) {
      await this.send("Input.dispatchMouseEvent", { type, x: box.x, y: box.y, button: "left", clickCount: 1 });
    }
  }

  get keyboard() {
    return {
      press: (key) => this.#press(key),
      type: async (text) => {
        for (const ch of text) await this.#press(ch === "\n" ? "Enter" : ch);
      },
    };
  }

  async #press(key) {
    let event;
    if (key === "Enter") {
      event = { key: "Enter", code: "Enter", windowsVirtualKeyCode: 13, text: "\r", unmodifiedText: "\r" };
    } else if (key === "Control+C") {
      event = { key: "c", code: "KeyC", windowsVirtualKeyCode: 67, modifiers: 2 };
    } else if ([...key].length === 1) {
      const upper = key.toUpperCase();
      const letter = /^[A-Z]$/.test(upper);
      event = { key, text: key, unmodifiedText: key, ...(letter ? { code: `Key${upper}`, windowsVirtualKeyCode: upper.charCodeAt(0) } : {}) };
    } else {
      throw new Error(`no key ${key}`);
    }
    await this.send("Input.dispatchKeyEvent", { type: event.text === undefined ? "rawKeyDown" : "keyDown", ...event });
    await this.send("Input.dispatchKeyEvent", { type: "keyUp", ...event, text: undefined, unmodifiedText: undefined });
  }
}

const xtermSource = readFileSync(createRequire(import.meta.url).resolve("@xterm/xterm/lib/xterm.js"), "utf8");
const webglSource = readFileSync(createRequire(import.meta.url).resolve("@xterm/addon-webgl/lib/addon-webgl.js"), "utf8");

const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"], env: { ...process.env, HOME: home } });
let failed = false;
try {
  const page = await RawPage.open(await browser.newBrowserCDPSession(), 1100, 700);
  await page.send("WebAuthn.enable");
  await page.send("WebAuthn.addVirtualAuthenticator", {
    options: { protocol: "ctap2", transport: "internal", hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });

  step("a passkey for the CLI-enrolled owner, then the login");
  await page.goto(`${base}/#/passkey`);
  await page.fill("#first-passkey input[name=username]", owner);
  await page.fill("#first-passkey input[name=password]", ownerPassword);
  await page.fill("#first-passkey input[name=totp]", (await ask("TOTP_NOW?")).replace(/^TOTP /, ""));
  await page.click("#first-passkey button[type=submit]");
  await page.waitForSelector("[data-notice='passkey-added']", { timeout: 30000 });
  await page.goto(`${base}/#/login`);
  await page.fill("input[name=username]", owner);
  await page.fill("input[name=password]", ownerPassword);
  await page.click("#login button[type=submit]");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });

  // Times in the page (performance.now()): the click on Open, the end of the
  // step-up's response, the first glyph in the terminal's rows.
  const armOpen = () =>
    page.evaluate(() => {
      const w = window;
      performance.clearResourceTimings();
      w.__open = { click: 0, painted: 0 };
      document.addEventListener("click", () => (w.__open.click ||= performance.now()), { capture: true, once: true });
      const observer = new MutationObserver(() => {
        const rows = document.querySelector(".xterm-rows");
        if (rows !== null && /\S/.test((rows.textContent ?? "").replace(/\u00a0/g, " "))) {
          w.__open.painted = performance.now();
          observer.disconnect();
        }
      });
      observer.observe(document.body, { subtree: true, childList: true, characterData: true });
    });
  const stepUpEnd = () =>
    page.evaluate(() => {
      const entries = performance.getEntriesByType("resource").filter((e) => e.name.endsWith("/api/v1/auth/step-up"));
      return entries.length > 0 ? entries[entries.length - 1].responseEnd : 0;
    });
  const screen = () =>
    page.evaluate(() => Array.from(document.querySelectorAll(".xterm-rows > div"), (row) => (row.textContent ?? "").replace(/\u00a0/g, " ").trimEnd()).join("\n"));
  const waitFor = async (pattern, what, ms = 60000) => {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      if (pattern.test(await screen())) return;
      await page.waitForTimeout(50);
    }
    throw new Error(`${what} did not appear`);
  };
  const backToHosts = async () => {
    await page.click("text=Back to the hosts");
    await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  };

  step("open to the first glyph");
  const fromClick = [];
  const fromStepUp = [];
  for (let i = 0; i < 5; i += 1) {
    await armOpen();
    await page.click("tr[data-host] button:text('Open')");
    await page.waitForFunction(() => window.__open.painted > 0, null, { timeout: 60000 });
    const times = await page.evaluate(() => window.__open);
    fromClick.push(times.painted - times.click);
    fromStepUp.push(times.painted - (await stepUpEnd()));
    await waitFor(/[$#] ?$/m, "the prompt");
    if (i < 4) {
      await page.click(".terminal-host");
      await page.keyboard.type("exit 0\n");
      await page.waitForSelector("[data-exit='0']", { timeout: 30000 });
      await backToHosts();
    }
  }
  figure("console_open_click_to_first_glyph_p50", median(fromClick).toFixed(1), "ms");
  figure("console_open_after_step_up_to_first_glyph_p50", median(fromStepUp).toFixed(1), "ms");

  step("keystroke echo");
  await page.click(".terminal-host");
  await page.keyboard.type("stty -icanon; cat > /dev/null\n");
  await page.waitForTimeout(500);
  await page.evaluate(() => {
    const w = window;
    document.addEventListener("keydown", () => (w.__keydown = performance.now()), { capture: true });
  });
  const echoes = [];
  let typed = "";
  for (let i = 0; i < 330; i += 1) {
    if (typed.length >= 60) {
      await page.keyboard.press("Enter");
      await page.waitForTimeout(50);
      typed = "";
    }
    const ch = String.fromCharCode(97 + (i % 26));
    typed += ch;
    await page.evaluate((expected) => {
      const w = window;
      w.__echo = new Promise((resolve) => {
        const check = () => {
          const rows = Array.from(document.querySelectorAll(".xterm-rows > div"), (row) => (row.textContent ?? "").replace(/\u00a0/g, " ").trimEnd());
          return rows.some((row) => row === expected);
        };
        const observer = new MutationObserver(() => {
          if (check()) {
            observer.disconnect();
            resolve(performance.now() - w.__keydown);
          }
        });
        observer.observe(document.querySelector(".xterm-rows"), { subtree: true, childList: true, characterData: true });
      });
    }, typed);
    await page.keyboard.press(ch);
    const took = await page.evaluate(() => window.__echo);
    if (i >= 30) echoes.push(took);
  }
  figure("console_keystroke_echo_p50", quantile(echoes, 0.5).toFixed(2), "ms");
  figure("console_keystroke_echo_p99", quantile(echoes, 0.99).toFixed(2), "ms");
  await page.keyboard.press("Control+C");
  await page.keyboard.type("stty icanon; clear\n");
  await page.waitForTimeout(500);

  step("16 MiB burst");
  // A Terminal of the same options and size as the console's, beside it.
  await page.evaluate(xtermSource);
  await page.evaluate(webglSource);
  // The same renderer as the console's (D-702), in the comparison too.
  const renderer = await page.evaluate(() => document.querySelector("[data-renderer]")?.getAttribute("data-renderer"));
  figure("console_renderer_webgl", renderer === "webgl" ? 1 : 0, "bool");
  await page.click(".terminal-host");
  await page.keyboard.type("echo SIZE=$(stty size | tr ' ' x)\n");
  let size = null;
  for (let i = 0; i < 100 && size === null; i += 1) {
    size = (await screen()).match(/SIZE=(\d+)x(\d+)/);
    if (size === null) await page.waitForTimeout(50);
  }
  if (size === null) throw new Error("stty size did not answer");
  const [rows, cols] = [Number(size[1]), Number(size[2])];
  const tab = [];
  const memory = [];
  const tabFrames = [];
  const memoryFrames = [];
  // Counts animation frames from now until the returned function is called
  // (which stops the count and returns it).
  await page.evaluate(() => {
    window.__countFrames = () => {
      let frames = 0;
      let counting = true;
      const count = () => {
        if (!counting) return;
        frames += 1;
        requestAnimationFrame(count);
      };
      requestAnimationFrame(count);
      return () => {
        counting = false;
        return frames;
      };
    };
  });
  for (let run = 0; run < BURST_RUNS; run += 1) {
    await page.click(".terminal-host");
    // Typed with $((..)): only the output has the digits.
    await page.keyboard.type(`clear; cat ${burstFile}; echo BURST-E$((${run}+1))ND`);
    await page.evaluate((marks) => {
      const rows = document.querySelector(".xterm-rows");
      // From the Enter (the burst's first byte follows within a round trip;
      // a first line may scroll away before a frame paints it).
      const start = performance.now();
      window.__burst = new Promise((resolve) => {
        // The frames the page ran while the burst was drawn, as for the
        // write from memory below.
        const frames = window.__countFrames();
        const observer = new MutationObserver(() => {
          const text = (rows.textContent ?? "").replace(/\u00a0/g, " ");
          if (text.includes(marks.end)) {
            observer.disconnect();
            resolve({ start, end: performance.now(), frames: frames() });
          }
        });
        observer.observe(rows, { subtree: true, childList: true, characterData: true });
      });
    }, { end: `BURST-E${run + 1}ND` });
    if (profiling && run === 0) await profileStart(page);
    const tabCpu = cpuAccounting ? threadTimes() : null;
    await page.keyboard.press("Enter");
    const result = await page.evaluate(() => window.__burst);
    if (tabCpu) cpuSince(tabCpu, "tab");
    if (profiling && run === 0) await profileStop(page, "tab");
    tab.push(receivedMiB / ((result.end - result.start) / 1000));
    tabFrames.push(result.frames / ((result.end - result.start) / 1000));

    // The bytes go into the page first, so a profile of the write holds
    // only the write.
    await page.evaluate((input) => {
      window.__burstInput = input;
    }, { data: received, cols, rows, renderer });
    if (profiling && run === 0) await profileStart(page);
    const memoryCpu = cpuAccounting ? threadTimes() : null;
    const { took, frames } = await page.evaluate(
      () =>
        new Promise((resolve) => {
          const input = window.__burstInput;
          window.__burstInput = undefined;
          const data = input.data;
          const view = document.querySelector(".terminal-host");
          const box = view.getBoundingClientRect();
          const holder = document.createElement("div");
          holder.style.cssText = `position:fixed;left:0;top:0;width:${box.width}px;height:${box.height}px;z-index:10;background:#000`;
          document.body.append(holder);
          const term = new window.Terminal({ cursorBlink: false, scrollback: 5000, fontSize: 14, allowProposedApi: false, convertEol: false, cols: input.cols, rows: input.rows });
          term.open(holder);
          if (input.renderer === "webgl") term.loadAddon(new window.WebglAddon.WebglAddon());
          const t0 = performance.now();
          const frames = window.__countFrames();
          const chunk = 64 * 1024;
          let at = 0;
          const next = () => {
            const piece = data.slice(at, at + chunk);
            at += chunk;
            if (at >= data.length) {
              term.write(piece, () =>
                requestAnimationFrame(() => {
                  const t1 = performance.now();
                  const counted = frames();
                  term.dispose();
                  holder.remove();
                  resolve({ took: t1 - t0, frames: counted });
                }),
              );
            } else {
              term.write(piece);
              next();
            }
          };
          next();
        }),
    );
    if (memoryCpu) cpuSince(memoryCpu, "memory");
    if (profiling && run === 0) await profileStop(page, "memory");
    memory.push(receivedMiB / (took / 1000));
    memoryFrames.push(frames / (took / 1000));
  }
  if (cpuAccounting) cpuReport();
  figure("console_burst_bytes", received.length, "bytes");
  figure("console_burst_tab_mib_s", median(tab).toFixed(1), "MiB/s");
  figure("console_burst_xterm_memory_mib_s", median(memory).toFixed(1), "MiB/s");
  figure("console_burst_tab_over_memory", (median(tab) / median(memory)).toFixed(2), "ratio");
  figure("console_burst_tab_frames_per_s", median(tabFrames).toFixed(1), "frames/s");
  figure("console_burst_xterm_memory_frames_per_s", median(memoryFrames).toFixed(1), "frames/s");
  console.log("OK");
} catch (error) {
  failed = true;
  console.log(`FAILED ${error instanceof Error ? error.stack : String(error)}`);
} finally {
  await browser.close();
  lines.close();
  rmSync(burstDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
