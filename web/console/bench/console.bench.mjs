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
//   write is parsed and the next frame painted. Three runs each, the median.
// - Keystroke echo: keydown in the tab -> the echoed glyph painted in the
//   terminal's rows (the PTY's echo at `cat > /dev/null`), 300 samples after
//   30; p50 and p99.
// - Open: the click on Open -> the first glyph of the shell painted, and the
//   same from the end of the passkey step-up (its response), median of five.
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { createServer, connect } from "node:net";
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

const forwarder = createServer((client) => {
  const upstream = connect(port, "127.0.0.1");
  client.pipe(upstream).pipe(client);
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on("error", end);
  upstream.on("error", end);
});
await new Promise((resolve, reject) => forwarder.listen(443, "127.0.0.1", resolve).on("error", reject));
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

const xtermSource = readFileSync(createRequire(import.meta.url).resolve("@xterm/xterm/lib/xterm.js"), "utf8");

const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"], env: { ...process.env, HOME: home } });
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1100, height: 700 } });
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send("WebAuthn.enable");
  await cdp.send("WebAuthn.addVirtualAuthenticator", {
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
  for (let run = 0; run < 3; run += 1) {
    await page.click(".terminal-host");
    // Typed with $((..)): only the output has the digits.
    await page.keyboard.type(`clear; cat ${burstFile}; echo BURST-E$((${run}+1))ND`);
    await page.evaluate((marks) => {
      const rows = document.querySelector(".xterm-rows");
      // From the Enter (the burst's first byte follows within a round trip;
      // a first line may scroll away before a frame paints it).
      const start = performance.now();
      window.__burst = new Promise((resolve) => {
        const observer = new MutationObserver(() => {
          const text = (rows.textContent ?? "").replace(/\u00a0/g, " ");
          if (text.includes(marks.end)) {
            observer.disconnect();
            resolve({ start, end: performance.now() });
          }
        });
        observer.observe(rows, { subtree: true, childList: true, characterData: true });
      });
    }, { end: `BURST-E${run + 1}ND` });
    await page.keyboard.press("Enter");
    const result = await page.evaluate(() => window.__burst);
    tab.push(receivedMiB / ((result.end - result.start) / 1000));

    const took = await page.evaluate(
      (input) =>
        new Promise((resolve) => {
          const data = input.data;
          const view = document.querySelector(".terminal-host");
          const box = view.getBoundingClientRect();
          const holder = document.createElement("div");
          holder.style.cssText = `position:fixed;left:0;top:0;width:${box.width}px;height:${box.height}px;z-index:10;background:#000`;
          document.body.append(holder);
          const term = new window.Terminal({ cursorBlink: true, scrollback: 5000, fontSize: 14, allowProposedApi: false, convertEol: false, cols: input.cols, rows: input.rows });
          term.open(holder);
          const t0 = performance.now();
          const chunk = 64 * 1024;
          let at = 0;
          const next = () => {
            const piece = data.slice(at, at + chunk);
            at += chunk;
            if (at >= data.length) {
              term.write(piece, () =>
                requestAnimationFrame(() => {
                  const t1 = performance.now();
                  term.dispose();
                  holder.remove();
                  resolve(t1 - t0);
                }),
              );
            } else {
              term.write(piece);
              next();
            }
          };
          next();
        }),
      { data: received, cols, rows },
    );
    memory.push(receivedMiB / (took / 1000));
  }
  figure("console_burst_bytes", received.length, "bytes");
  figure("console_burst_tab_mib_s", median(tab).toFixed(1), "MiB/s");
  figure("console_burst_xterm_memory_mib_s", median(memory).toFixed(1), "MiB/s");
  figure("console_burst_tab_over_memory", (median(tab) / median(memory)).toFixed(2), "ratio");
  console.log("OK");
} catch (error) {
  failed = true;
  console.log(`FAILED ${error instanceof Error ? error.stack : String(error)}`);
} finally {
  await browser.close();
  forwarder.close();
  lines.close();
  rmSync(burstDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
