// The web console end to end in a real headless Chromium (Debian's
// /usr/bin/chromium, driven over CDP by playwright-core; no browser download),
// against the real bothy-server and a real bothy-host under supervise with a
// real session user. Run by crates/cli/tests/console_e2e.rs, which starts the
// scene, gives this script an enrollment code on stdin and computes the TOTP
// codes on the server's manual clock:
//
//   stdin  <- "TOTP <code>"          after this script printed "TOTP_SECRET <secret>"
//   stdout -> "STEP <name>"          progress, "SCREENSHOTS <folder>", "OK" at the end
//
// Environment: E2E_PORT (the server's port on 127.0.0.1), E2E_CA (its CA),
// E2E_CODE (the enrollment code), E2E_SESSION_USER, E2E_SCREENSHOTS.
// The browser trusts the server's CA through an NSS database of its own
// (certutil), and reaches it as https://localhost (the server's public_url,
// the WebAuthn origin) through a TCP forwarder on 127.0.0.1:443.
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync } from "node:fs";
import { createServer, connect } from "node:net";
import { createInterface } from "node:readline";
import { tmpdir } from "node:os";
import { join } from "node:path";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const port = Number(env("E2E_PORT"));
const sessionUser = env("E2E_SESSION_USER");
const shots = env("E2E_SCREENSHOTS");
mkdirSync(shots, { recursive: true });
console.log(`SCREENSHOTS ${shots}`);
const step = (name) => console.log(`STEP ${name}`);

const lines = createInterface({ input: process.stdin });
const waiting = [];
lines.on("line", (line) => waiting.shift()?.(line));
const ask = (question) =>
  new Promise((resolve) => {
    waiting.push(resolve);
    console.log(question);
  });

// https://localhost:443 -> the server.
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

// A browser profile whose NSS database trusts the server's CA.
const home = mkdtempSync(join(tmpdir(), "bothy-console-e2e-"));
const nss = join(home, ".pki", "nssdb");
mkdirSync(nss, { recursive: true });
execFileSync("certutil", ["-N", "--empty-password", "-d", `sql:${nss}`]);
execFileSync("certutil", ["-A", "-t", "C,,", "-n", "bothy-test-ca", "-i", env("E2E_CA"), "-d", `sql:${nss}`]);

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  // Root in CI: Chromium's own sandbox needs an unprivileged user.
  args: ["--no-sandbox"],
  env: { ...process.env, HOME: home },
});
const problems = [];
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 1100, height: 700 } });
  const page = await context.newPage();
  page.on("console", (m) => {
    if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  const cdp = await context.newCDPSession(page);
  await cdp.send("WebAuthn.enable");
  await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: { protocol: "ctap2", transport: "internal", hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });

  step("csp header");
  const response = await page.goto(`${base}/#/enroll`);
  const csp = response.headers()["content-security-policy"] ?? "";
  if (!csp.includes("script-src 'self'") || !csp.includes("frame-ancestors 'none'")) throw new Error(`CSP: ${csp}`);

  step("enroll with passkey");
  await page.fill("input[name=code]", env("E2E_CODE"));
  await page.fill("input[name=password]", "a console password 2026");
  await page.fill("input[name=password2]", "a console password 2026");
  await page.click("#enroll button[type=submit]");
  await page.waitForSelector("[data-totp-secret]", { timeout: 30000 });
  const secret = (await page.textContent("[data-totp-secret]")).trim();
  const answer = await ask(`TOTP_SECRET ${secret}`);
  await page.fill("input[name=totp]", answer.replace(/^TOTP /, ""));
  await page.click("#confirm button[type=submit]");
  await page.waitForSelector("text=Enrolled.", { timeout: 30000 });

  step("login");
  await page.goto(`${base}/#/login`);
  const username = await ask("USERNAME?");
  await page.fill("input[name=username]", username.replace(/^USERNAME /, ""));
  await page.fill("input[name=password]", "a console password 2026");
  await page.screenshot({ path: join(shots, "login.png") });
  await page.click("#login button[type=submit]");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.screenshot({ path: join(shots, "hosts.png") });

  step("open a shell");
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector(".xterm-rows", { timeout: 30000 });
  // The rendered rows of the xterm buffer, one line each.
  const screen = () =>
    page.evaluate(() =>
      Array.from(document.querySelectorAll(".xterm-rows > div"), (row) => (row.textContent ?? "").replace(/\u00a0/g, " ").trimEnd()).join("\n"),
    );
  const waitFor = async (pattern, what) => {
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      const text = await screen();
      const match = text.match(pattern);
      if (match) return match;
      await page.waitForTimeout(100);
    }
    throw new Error(`${what} did not appear; the screen: ${await screen()}`);
  };
  await waitFor(/[$#] ?$/m, "the prompt");
  await page.click(".terminal-host");
  await page.keyboard.type("echo CANARY-$((6*7)) $(id -un)\n");
  await waitFor(new RegExp(`CANARY-42 ${sessionUser}`), "the canary and the session user");
  await page.screenshot({ path: join(shots, "session-desktop.png") });

  step("reload reattaches with replay");
  await page.reload();
  // A new passkey step-up (the console has no device key), then the attach
  // replays the session's recent output.
  await page.waitForSelector(".xterm-rows", { timeout: 30000 });
  await waitFor(new RegExp(`CANARY-42 ${sessionUser}`), "the replayed canary");
  await page.click(".terminal-host");
  await page.keyboard.type("echo AGAIN-$((1+1))\n");
  await waitFor(/AGAIN-2/, "input after the reattach");

  step("resize follows");
  let probe = 0;
  const sizeOf = async () => {
    probe += 1;
    await page.keyboard.type(`echo SIZE${probe}=$(stty size | tr ' ' x)\n`);
    const m = await waitFor(new RegExp(`SIZE${probe}=(\\d+)x(\\d+)`), "stty size");
    return `${m[1]} ${m[2]}`;
  };
  const first = await sizeOf();
  await page.setViewportSize({ width: 800, height: 500 });
  await page.waitForTimeout(300);
  const second = await sizeOf();
  if (first === second) throw new Error(`stty size did not follow the viewport: ${first}`);

  step("osc 52, osc 8 and title query never reach the page");
  await page.keyboard.type("clear; printf 'A\\033]52;c;aGk=\\007B \\033]8;;https://example.org/\\033\\\\LINK\\033]8;;\\033\\\\ C\\033[21tD\\n'\n");
  await waitFor(/AB LINK \[https:\/\/example\.org\/\] CD/, "the filtered line");
  const links = await page.evaluate(() => document.querySelectorAll(".xterm a, .xterm-rows a").length);
  if (links !== 0) throw new Error(`${links} links in the terminal`);

  step("exit 7");
  await page.keyboard.type("exit 7\n");
  await page.waitForSelector("[data-exit='7']", { timeout: 30000 });

  step("mobile layout and ctrl-c from the bar");
  await page.setViewportSize({ width: 390, height: 844 });
  await page.click("text=Back to the hosts");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector(".extra-keys button[data-key='Ctrl']", { state: "visible", timeout: 30000 });
  await waitFor(/[$#] ?$/m, "the prompt");
  await page.click(".terminal-host");
  await page.keyboard.type('sleep 100; echo SLE""PT\n');
  await page.waitForTimeout(500);
  await page.click(".extra-keys button[data-key='Ctrl']");
  await page.keyboard.type("c");
  await page.keyboard.type("echo AFTER-$((40+2))\n");
  const text = (await waitFor(/AFTER-42/, "the prompt after ctrl-c"))[0];
  void text;
  if ((await screen()).includes("SLEPT")) throw new Error("sleep was not interrupted");
  await page.screenshot({ path: join(shots, "session-mobile.png") });
  await page.keyboard.type("exit 0\n");
  await page.waitForSelector("[data-exit='0']", { timeout: 30000 });

  step("a re-paired host: hard warning, refused without confirmation, opens with it (TM-T18)");
  await page.setViewportSize({ width: 1100, height: 700 });
  await page.click("text=Back to the hosts");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  const repaired = await ask("REPAIR?");
  if (repaired !== "REPAIRED") throw new Error(`re-pairing: ${repaired}`);
  await page.click("button:text('Reload')");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector("[data-warning='pin-changed']", { timeout: 30000 });
  const warning = await page.textContent("[data-warning='pin-changed']");
  const prints = [...warning.matchAll(/(?:Pinned|Now): ([0-9A-Za-z ]+) \(generation/g)].map((m) => m[1]);
  if (prints.length !== 2 || prints[0] === prints[1]) throw new Error(`the warning shows both fingerprints: ${warning}`);
  await page.screenshot({ path: join(shots, "pin-changed.png") });
  await page.click("[data-confirm='no']");
  await page.waitForSelector("text=Not connected", { timeout: 10000 });
  if ((await page.$(".xterm-rows")) !== null) throw new Error("a terminal opened without the confirmation");
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector("[data-warning='pin-changed']", { timeout: 30000 });
  await page.click("[data-confirm='yes']");
  await page.waitForSelector(".xterm-rows", { timeout: 30000 });
  await waitFor(/[$#] ?$/m, "the prompt after the confirmed key change");
  await page.click(".terminal-host");
  await page.keyboard.type("exit 0\n");
  await page.waitForSelector("[data-exit='0']", { timeout: 30000 });
  // The new key is pinned: the next open shows no warning.
  await page.click("text=Back to the hosts");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector(".xterm-rows", { timeout: 30000 });
  if ((await page.$("[data-warning='pin-changed']")) !== null) throw new Error("warned again after the confirmation");
  await waitFor(/[$#] ?$/m, "the prompt");
  await page.click(".terminal-host");
  await page.keyboard.type("exit 0\n");
  await page.waitForSelector("[data-exit='0']", { timeout: 30000 });

  step("logout deletes the pins database");
  await page.click("text=Back to the hosts");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.click("button:text('Log out')");
  await page.waitForSelector("#login", { timeout: 30000 });
  const databases = await page.evaluate(async () => (await indexedDB.databases()).map((d) => d.name));
  if (databases.includes("bothy.terminal.pins")) throw new Error(`pins kept after logout: ${databases}`);
  const stored = await page.evaluate(() => JSON.stringify({ local: { ...localStorage }, session: { ...sessionStorage } }));
  if (stored !== '{"local":{},"session":{}}') throw new Error(`storage after logout: ${stored}`);

  if (problems.length > 0) throw new Error(problems.join("\n"));
  console.log("OK");
} catch (error) {
  failed = true;
  console.log(`FAILED ${error instanceof Error ? error.stack : String(error)}`);
  // What the page showed when it failed (no secrets are on the page).
  for (const page of browser.contexts().flatMap((c) => c.pages())) {
    await page.screenshot({ path: join(shots, "failure.png") }).catch(() => {});
    const text = await page.evaluate(() => document.body.innerText).catch(() => "");
    console.log(`PAGE ${text.replace(/\s+/g, " ").slice(0, 2000)}`);
  }
} finally {
  await browser.close();
  forwarder.close();
  lines.close();
}
process.exit(failed ? 1 : 0);
