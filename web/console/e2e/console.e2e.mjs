// The web console end to end in a real headless Chromium (Debian's
// /usr/bin/chromium, driven over CDP by playwright-core; no browser download),
// against the real bothy-server and a real bothy-host under supervise with a
// real session user. Run by crates/cli/tests/console_e2e.rs, which starts the
// scene, computes the TOTP codes on the server's manual clock and changes the
// scene when asked, in lines:
//
//   stdout -> "TOTP_NOW?"             stdin <- "TOTP <code>" (the CLI-enrolled owner's code)
//   stdout -> "TOTP_SECRET <secret>"  stdin <- "TOTP <code>" (the secret the enrollment page shows)
//   stdout -> "REPAIR?" / "ASSIGN?" / "UNASSIGN?" / "NO_PASSKEY?" / "CODE?"
//                                     stdin <- "REPAIRED" / "ASSIGNED" / "UNASSIGNED" / "GONE" / "CODE <code>"
//   stdout -> "STEP <name>"           progress, "SCREENSHOTS <folder>", "OK" at the end
//
// Environment: E2E_PORT (the server's port on 127.0.0.1), E2E_CA (its CA),
// E2E_OWNER and E2E_OWNER_PASSWORD (the owner, enrolled with the CLI: no
// passkey), E2E_SESSION_USER, E2E_SCREENSHOTS.
// The browser trusts the server's CA through an NSS database of its own
// (certutil), and reaches it as https://localhost (the server's public_url,
// the WebAuthn origin) through a forwarder on 127.0.0.1:443 that plays the
// network between the two (below).
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { connect as tlsConnect, createServer as tlsCreateServer } from "node:tls";
import { createInterface } from "node:readline";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

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

// A browser profile whose NSS database trusts the server's CA.
const home = mkdtempSync(join(tmpdir(), "bothy-console-e2e-"));
const nss = join(home, ".pki", "nssdb");
mkdirSync(nss, { recursive: true });
execFileSync("certutil", ["-N", "--empty-password", "-d", `sql:${nss}`]);
execFileSync("certutil", ["-A", "-t", "C,,", "-n", "bothy-test-ca", "-i", env("E2E_CA"), "-d", `sql:${nss}`]);

// The network between the tab and the server, for the refusals of 13 and the
// bad input: https://localhost:443 is a relay that can read and change what
// crosses it, as a server that turned against its users could. It holds a
// certificate for localhost from the server's local CA (the key beside
// E2E_CA), forwards every connection to the server over TLS and sees the
// device stream's WebSocket frames in the clear; the Noise inside them is the
// tab's and the host's. The stream runs in the tab's stream worker (D-716),
// where Playwright's routeWebSocket does not reach, so the tampering is
// here, on the wire. Modes, taken by each stream when it connects: "pass"
// relays; "record" keeps the tab's Noise message 1; "replay" sends that old
// message 1 instead of the new one (the host sees a used token: 4101); "flip"
// changes the last byte of message 1 (the host cannot decrypt it: 4104);
// "garble" changes a byte of the first transport message to the tab (it does
// not decrypt in the tab); "cut" closes the stream after message 1
// (mid-handshake). The server and the host are real.
const relayConfig = join(home, "relay.cnf");
writeFileSync(
  relayConfig,
  [
    "[req]", "distinguished_name = dn", "x509_extensions = leaf", "prompt = no",
    "[dn]", "CN = localhost",
    "[leaf]", "basicConstraints = critical, CA:FALSE", "keyUsage = critical, digitalSignature",
    "extendedKeyUsage = serverAuth", "subjectAltName = DNS:localhost",
  ].join("\n") + "\n",
);
execFileSync("openssl", [
  "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
  "-config", relayConfig, "-keyout", join(home, "relay.key"), "-out", join(home, "relay.pem"),
  "-CA", env("E2E_CA"), "-CAkey", join(dirname(env("E2E_CA")), "ca.key"),
], { stdio: ["ignore", "ignore", "inherit"] });
const serverCa = readFileSync(env("E2E_CA"));
let tamper = "pass";
let recorded = null;
/** The device streams the tab asked for, as the relay saw their upgrades. */
const streams = [];
/** The streams open now: their two connections, to break the network under them. */
const liveStreams = new Set();
const loseStreams = () => {
  for (const [client, upstream] of liveStreams) {
    client.destroy();
    upstream.destroy();
  }
  liveStreams.clear();
};
const STREAM_UPGRADE = /^GET \/api\/v1\/terminal\/sessions\/[0-9a-f-]+\/stream[ ?]/;
const HEAD_END = Buffer.from("\r\n\r\n");

/** Splits WebSocket frames (RFC 6455 5.2) out of a byte stream, whole. */
class Frames {
  #buffer = Buffer.alloc(0);
  /** The frames that `chunk` completes, each whole: [{ raw, opcode }]. */
  push(chunk) {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    const frames = [];
    for (;;) {
      const b = this.#buffer;
      if (b.length < 2) break;
      let len = b[1] & 0x7f;
      let at = 2;
      if (len === 126) {
        if (b.length < 4) break;
        len = b.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (b.length < 10) break;
        len = Number(b.readBigUInt64BE(2));
        at = 10;
      }
      if ((b[1] & 0x80) !== 0) at += 4; // the mask
      if (b.length < at + len) break;
      frames.push({ raw: Buffer.from(b.subarray(0, at + len)), opcode: b[0] & 0x0f });
      this.#buffer = b.subarray(at + len);
    }
    return frames;
  }
}

/**
 * Relays one device stream in `mode`, its upgrade request (`head`) read.
 * Masking is an XOR, so flipping a bit of a masked payload flips the same
 * bit of what the server unmasks.
 */
function relayStream(client, upstream, head, rest, mode) {
  upstream.write(head);
  let response = Buffer.alloc(0);
  let upgraded = false;
  const fromTab = new Frames();
  const toTab = new Frames();
  let tabMessages = 0;
  let hostMessages = 0;
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  const onTab = (chunk) => {
    for (const frame of fromTab.push(chunk)) {
      let raw = frame.raw;
      if (frame.opcode === 0x2) {
        tabMessages += 1;
        if (tabMessages === 1) {
          if (mode === "record") recorded = raw;
          if (mode === "replay" && recorded !== null) raw = recorded;
          if (mode === "flip") raw[raw.length - 1] ^= 0x01;
          if (mode === "cut") {
            // A close 1000 to the tab, and nothing to the server.
            client.end(Buffer.from([0x88, 0x02, 0x03, 0xe8]));
            upstream.destroy();
            return;
          }
        }
      }
      upstream.write(raw);
    }
  };
  const onServer = (chunk) => {
    for (const frame of toTab.push(chunk)) {
      if (frame.opcode === 0x2) {
        hostMessages += 1;
        if (mode === "garble" && hostMessages === 2) frame.raw[frame.raw.length - 1] ^= 0x01;
      }
      client.write(frame.raw);
    }
  };
  if (rest.length > 0) onTab(rest);
  client.on("data", onTab);
  upstream.on("data", (chunk) => {
    if (upgraded) {
      onServer(chunk);
      return;
    }
    response = Buffer.concat([response, chunk]);
    const at = response.indexOf(HEAD_END);
    if (at < 0) return;
    upgraded = true;
    client.write(response.subarray(0, at + HEAD_END.length));
    const after = response.subarray(at + HEAD_END.length);
    if (after.length > 0) onServer(after);
  });
  client.on("end", end);
  upstream.on("end", end);
}

const forwarder = tlsCreateServer(
  { key: readFileSync(join(home, "relay.key")), cert: readFileSync(join(home, "relay.pem")), ALPNProtocols: ["h2", "http/1.1"] },
  (client) => {
    const mode = tamper;
    const protocol = client.alpnProtocol || "http/1.1";
    const upstream = tlsConnect({ host: "127.0.0.1", port, servername: "localhost", ca: serverCa, ALPNProtocols: [protocol] });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end);
    upstream.on("error", end);
    if (protocol !== "http/1.1") {
      // HTTP/2: the console's API calls; the stream is always HTTP/1.1.
      client.pipe(upstream).pipe(client);
      return;
    }
    let head = Buffer.alloc(0);
    const first = (chunk) => {
      head = Buffer.concat([head, chunk]);
      const at = head.indexOf(HEAD_END);
      if (at < 0) return;
      client.off("data", first);
      const request = head.subarray(0, at + HEAD_END.length);
      const rest = head.subarray(at + HEAD_END.length);
      const line = request.subarray(0, request.indexOf("\r\n")).toString("latin1");
      if (STREAM_UPGRADE.test(line)) {
        streams.push(line.split(" ")[1]);
        // Breakable while it lasts (loseStreams).
        const pair = [client, upstream];
        liveStreams.add(pair);
        const forget = () => liveStreams.delete(pair);
        client.on("close", forget);
        upstream.on("close", forget);
        if (mode === "pass") {
          upstream.write(head);
          client.pipe(upstream).pipe(client);
        } else {
          relayStream(client, upstream, request, rest, mode);
        }
      } else {
        upstream.write(head);
        client.pipe(upstream).pipe(client);
      }
    };
    client.on("data", first);
  },
);
await new Promise((resolve, reject) => forwarder.listen(443, "127.0.0.1", resolve).on("error", reject));
const base = "https://localhost";

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
  // Everything the page logs and every URL it asks for or shows: no secret
  // may reach them (checked at the end).
  const logged = [];
  const urls = [];
  page.on("console", (m) => {
    logged.push(m.text());
    if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("request", (r) => urls.push(r.url()));
  page.on("framenavigated", (f) => urls.push(f.url()));
  const cdp = await context.newCDPSession(page);
  await cdp.send("WebAuthn.enable");
  const { authenticatorId } = await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: { protocol: "ctap2", transport: "internal", hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });

  step("csp header");
  const response = await page.goto(`${base}/#/login`);
  const csp = response.headers()["content-security-policy"] ?? "";
  if (!csp.includes("script-src 'self'") || !csp.includes("frame-ancestors 'none'")) throw new Error(`CSP: ${csp}`);

  step("a person enrolled with the CLI adds a passkey with password and TOTP (D-408)");
  const owner = env("E2E_OWNER");
  const ownerPassword = env("E2E_OWNER_PASSWORD");
  await page.click("#add-passkey");
  await page.waitForSelector("#first-passkey", { timeout: 30000 });
  await page.fill("#first-passkey input[name=username]", owner);
  await page.fill("#first-passkey input[name=password]", "not the password at all");
  await page.fill("#first-passkey input[name=totp]", "123456");
  await page.click("#first-passkey button[type=submit]");
  await page.waitForSelector("[role=alert]:has-text('is not right')", { timeout: 30000 });
  const totpNow = async () => (await ask("TOTP_NOW?")).replace(/^TOTP /, "");
  await page.fill("#first-passkey input[name=password]", ownerPassword);
  await page.fill("#first-passkey input[name=totp]", await totpNow());
  await page.click("#first-passkey button[type=submit]");
  await page.waitForSelector("[data-notice='passkey-added']", { timeout: 30000 });
  if ((await page.$("input[name=totp]")) !== null) throw new Error("the form stayed after the passkey was added");
  await page.screenshot({ path: join(shots, "passkey-added.png") });
  // No login came of it: the console still asks to log in.
  await page.goto(`${base}/#/hosts`);
  await page.waitForSelector("#login", { timeout: 30000 });
  // A second passkey this way is refused.
  await page.click("#add-passkey");
  await page.fill("#first-passkey input[name=username]", owner);
  await page.fill("#first-passkey input[name=password]", ownerPassword);
  await page.fill("#first-passkey input[name=totp]", await totpNow());
  await page.click("#first-passkey button[type=submit]");
  await page.waitForSelector("[role=alert]:has-text('You have a passkey already')", { timeout: 30000 });

  step("login with password and the new passkey");
  await page.goto(`${base}/#/login`);
  await page.fill("input[name=username]", owner);
  await page.fill("input[name=password]", ownerPassword);
  await page.screenshot({ path: join(shots, "login.png") });
  await page.click("#login button[type=submit]");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.screenshot({ path: join(shots, "hosts.png") });

  step("open a shell");
  tamper = "record";
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector(".xterm-rows", { timeout: 30000 });
  // The renderer (D-702): this headless Chromium draws WebGL in software
  // (SwiftShader) or not at all, so the console keeps the DOM renderer; the
  // WebGL one on a GPU is listed in tests/catalogue.yaml.
  const drawing = await page.evaluate(() => {
    const gl = document.createElement("canvas").getContext("webgl2");
    const info = gl?.getExtension("WEBGL_debug_renderer_info");
    return {
      renderer: document.querySelector("[data-renderer]")?.getAttribute("data-renderer"),
      gl: gl && info ? String(gl.getParameter(info.UNMASKED_RENDERER_WEBGL)) : gl ? "webgl2 without renderer info" : "no webgl2",
    };
  });
  console.log(`renderer: ${drawing.renderer} (WebGL here: ${drawing.gl})`);
  if (drawing.renderer !== "dom") throw new Error(`expected the DOM renderer beside a software WebGL, got ${JSON.stringify(drawing)}`);
  // The rendered rows of the xterm buffer, one line each.
  const screenOf = (p) =>
    p.evaluate(() =>
      Array.from(document.querySelectorAll(".xterm-rows > div"), (row) => (row.textContent ?? "").replace(/\u00a0/g, " ").trimEnd()).join("\n"),
    );
  const screen = () => screenOf(page);
  const waitOn = async (p, pattern, what) => {
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      const text = await screenOf(p);
      const match = text.match(pattern);
      if (match) return match;
      await p.waitForTimeout(100);
    }
    throw new Error(`${what} did not appear; the screen: ${await screenOf(p)}`);
  };
  const waitFor = (pattern, what) => waitOn(page, pattern, what);
  // A closed stream: the sentence of section 13, and a terminal that takes no input.
  const closedWith = async (code, words) => {
    await page.waitForSelector(`[data-close='${code}']`, { timeout: 30000 });
    const text = await page.textContent(`[data-close='${code}']`);
    if (!text.includes(words)) throw new Error(`close ${code} shows: ${text}`);
    await page.waitForSelector(".terminal-view[data-ended]", { timeout: 5000 });
    return text;
  };
  await waitFor(/[$#] ?$/m, "the prompt");
  await page.click(".terminal-host");
  await page.keyboard.type("echo CANARY-$((6*7)) $(id -un)\n");
  await waitFor(new RegExp(`CANARY-42 ${sessionUser}`), "the canary and the session user");
  await page.screenshot({ path: join(shots, "session-desktop.png") });

  step("reload reattaches with replay");
  tamper = "pass";
  await page.reload();
  // A new passkey step-up (the console has no device key), then the attach
  // replays the session's recent output.
  await page.waitForSelector(".xterm-rows", { timeout: 30000 });
  await waitFor(new RegExp(`CANARY-42 ${sessionUser}`), "the replayed canary");
  await page.click(".terminal-host");
  await page.keyboard.type("echo AGAIN-$((1+1))\n");
  await waitFor(/AGAIN-2/, "input after the reattach");

  step("4101: an old message 1 (a used token) on the reattach");
  tamper = "replay";
  await page.reload();
  await closedWith(4101, "The session token was not accepted");
  tamper = "pass";
  await page.click("button:text('Attach again')");
  await waitFor(/AGAIN-2/, "the replay after attaching again");
  await page.click(".terminal-host");
  await page.keyboard.type("echo BACK-$((2+2))\n");
  await waitFor(/BACK-4/, "input after attaching again");

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

  step("a lost connection: the tab reattaches by itself and replays");
  await page.keyboard.type("echo BEFORE-LOSS-$((3+4))\n");
  await waitFor(/BEFORE-LOSS-7/, "the line before the loss");
  const streamsBeforeLoss = streams.length;
  loseStreams();
  // A new step-up (the virtual authenticator answers it) and an attach, on
  // a new stream; the session and its shell are the same.
  const deadline = Date.now() + 30000;
  while (streams.length === streamsBeforeLoss && Date.now() < deadline) await page.waitForTimeout(100);
  if (streams.length === streamsBeforeLoss) throw new Error(`no reattach after the loss; the screen: ${await screen()}`);
  await waitFor(/BEFORE-LOSS-7/, "the replayed line");
  await page.waitForSelector(".terminal-view:not([data-ended])", { timeout: 30000 });
  await page.click(".terminal-host");
  await page.keyboard.type("echo AFTER-LOSS-$((5+5))\n");
  await waitFor(/AFTER-LOSS-10/, "input after the reattach by itself");

  step("osc 52, osc 8 and title query never reach the page");
  await page.keyboard.type("clear; printf 'A\\033]52;c;aGk=\\007B \\033]8;;https://example.org/\\033\\\\LINK\\033]8;;\\033\\\\ C\\033[21tD\\n'\n");
  await waitFor(/AB LINK \[https:\/\/example\.org\/\] CD/, "the filtered line");
  const links = await page.evaluate(() => document.querySelectorAll(".xterm a, .xterm-rows a").length);
  if (links !== 0) throw new Error(`${links} links in the terminal`);

  step("exit 7");
  await page.keyboard.type("exit 7\n");
  await page.waitForSelector("[data-exit='7']", { timeout: 30000 });

  step("4104: a changed message 1 is refused by the host");
  const open = async () => {
    await page.click("text=Back to the hosts");
    await page.waitForSelector("tr[data-host]", { timeout: 30000 });
    await page.click("tr[data-host] button:text('Open')");
  };
  tamper = "flip";
  await open();
  await closedWith(4104, "This can mean that someone tampers with the connection");
  if ((await page.$("button:text('Open again')")) !== null) throw new Error("4104 offers a retry");
  await page.screenshot({ path: join(shots, "close-4104.png") });

  step("a transport message that does not decrypt in the tab");
  tamper = "garble";
  await open();
  await closedWith(4104, "tampers");

  step("a stream closed mid-handshake");
  tamper = "cut";
  await open();
  await page.waitForSelector("[data-close]", { timeout: 30000 });
  await page.waitForSelector(".terminal-view[data-ended]", { timeout: 5000 });
  const cut = await page.textContent("[data-close]");
  if (!/closed|lost/.test(cut)) throw new Error(`mid-handshake: ${cut}`);
  tamper = "pass";

  step("malformed JSON answers");
  await page.click("text=Back to the hosts");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.route("**/api/v1/hosts", (route) => route.fulfill({ status: 200, contentType: "application/json", body: "{\"hosts\": [" }));
  await page.click("button:text('Reload')");
  await page.waitForSelector("[role=alert]:has-text('was not JSON')", { timeout: 30000 });
  await page.unroute("**/api/v1/hosts");
  await page.click("button:text('Reload')");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.route("**/api/v1/hosts/*/terminal/sessions", (route) => route.fulfill({ status: 200, contentType: "application/json", body: "{\"session_id\": 5}" }));
  const streamsBefore = streams.length;
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector("[role=alert]:has-text('The grant lacks')", { timeout: 30000 });
  await page.waitForSelector(".terminal-view[data-ended]", { timeout: 5000 });
  if (streams.length !== streamsBefore) throw new Error(`a stream was opened after a malformed grant: ${streams.slice(streamsBefore)}`);
  await page.unroute("**/api/v1/hosts/*/terminal/sessions");

  step("a stream worker that cannot load: a clear message, and no session asked for (D-709)");
  await page.click("text=Back to the hosts");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.route("**/assets/stream-worker.js", (route) => route.fulfill({ status: 404, contentType: "text/plain", body: "gone" }));
  const asked = [];
  const streamsBeforeWorker = streams.length;
  const onRequest = (request) => {
    if (request.method() === "POST" && /\/terminal\/sessions/.test(request.url())) asked.push(request.url());
  };
  page.on("request", onRequest);
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector("[role=alert]:has-text('stream worker could not run')", { timeout: 30000 });
  await page.waitForSelector(".terminal-view[data-ended]", { timeout: 5000 });
  page.off("request", onRequest);
  if (asked.length !== 0) throw new Error(`a session was asked for without a worker to run it: ${asked}`);
  if (streams.length !== streamsBeforeWorker) throw new Error(`a stream was opened without a worker to run it: ${streams.slice(streamsBeforeWorker)}`);
  await page.unroute("**/assets/stream-worker.js");

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

  step("8.4: the foreign assignee warning comes before the step-up");
  await page.click("text=Back to the hosts");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  if ((await ask("ASSIGN?")) !== "ASSIGNED") throw new Error("assigning");
  await page.click("button:text('Reload')");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  const stepUps = () => urls.filter((u) => u.endsWith("/api/v1/auth/step-up/passkey/start")).length;
  const before = stepUps();
  await page.click("tr[data-host] button:text('Open')");
  await page.waitForSelector("[data-warning='foreign-assignee']", { timeout: 30000 });
  await page.screenshot({ path: join(shots, "foreign-assignee.png") });
  if (stepUps() !== before) throw new Error("a step-up started before the warning");
  await page.click("[data-confirm='no']");
  await page.waitForSelector("text=Not opened.", { timeout: 10000 });
  if (stepUps() !== before) throw new Error("a step-up after the warning was declined");
  await page.click("tr[data-host] button:text('Open')");
  await page.click("[data-confirm='yes']");
  await page.waitForSelector(".xterm-rows", { timeout: 30000 });
  await waitFor(/[$#] ?$/m, "the prompt after the warning");
  if (stepUps() !== before + 1) throw new Error("the open after the warning made no step-up");
  await page.click(".terminal-host");
  await page.keyboard.type("exit 0\n");
  await page.waitForSelector("[data-exit='0']", { timeout: 30000 });
  if ((await ask("UNASSIGN?")) !== "UNASSIGNED") throw new Error("unassigning");

  step("4103: another device attaches; no secret in storage, log or URL while a session runs");
  await open();
  await page.waitForSelector(".xterm-rows", { timeout: 30000 });
  await waitFor(/[$#] ?$/m, "the prompt");
  const attached = JSON.parse(await page.evaluate(() => sessionStorage.getItem("bothy.console.attached"))).session_id;
  const cookies = (await context.cookies()).map((c) => c.value);
  const csrf = await page.evaluate(() => sessionStorage.getItem("bothy.console.csrf"));
  const local = await page.evaluate(() => localStorage.length);
  if (local !== 0) throw new Error("localStorage is used");
  if (cookies.length === 0 || csrf === null) throw new Error("no login to check");
  const secrets = [...cookies, csrf, "bothy_at_", "bothy_st_", "bothy_ec_"];
  const other = await browser.newContext({ viewport: { width: 1100, height: 700 } });
  const page2 = await other.newPage();
  const cdp2 = await other.newCDPSession(page2);
  await cdp2.send("WebAuthn.enable");
  const secondKey = await cdp2.send("WebAuthn.addVirtualAuthenticator", {
    options: { protocol: "ctap2", transport: "internal", hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });
  for (const credential of (await cdp.send("WebAuthn.getCredentials", { authenticatorId })).credentials) {
    await cdp2.send("WebAuthn.addCredential", { authenticatorId: secondKey.authenticatorId, credential });
  }
  await page2.goto(`${base}/#/login`);
  await page2.fill("input[name=username]", owner);
  await page2.fill("input[name=password]", ownerPassword);
  await page2.click("#login button[type=submit]");
  await page2.waitForSelector(`li[data-session='${attached}']`, { timeout: 30000 });
  await page2.click(`li[data-session='${attached}'] button:text('Attach')`);
  await page2.waitForSelector(".xterm-rows", { timeout: 30000 });
  await closedWith(4103, "taken over by another device");
  await page.screenshot({ path: join(shots, "close-4103.png") });
  await waitOn(page2, /[$#] ?$/m, "the prompt in the second browser");
  await page2.click(".terminal-host");
  await page2.keyboard.type("exit 0\n");
  await page2.waitForSelector("[data-exit='0']", { timeout: 30000 });
  await other.close();

  step("a person without a passkey gets the notice, not a TOTP field");
  if ((await ask("NO_PASSKEY?")) !== "GONE") throw new Error("removing the passkey");
  await open();
  await page.waitForSelector("[data-notice='no-passkey']", { timeout: 30000 });
  if ((await page.$$("input")).length !== 0) throw new Error("the notice came with an input field");
  if ((await page.$("input[name=totp], input[inputmode=numeric]")) !== null) throw new Error("a TOTP field");
  await page.screenshot({ path: join(shots, "no-passkey.png") });

  for (const text of [...logged, ...urls]) {
    for (const secret of secrets) {
      if (text.includes(secret)) throw new Error("a secret reached the console log or a URL");
    }
  }

  step("logout deletes the pins database");
  await page.click(".terminal-view header button:text-is('Hosts')");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  await page.click("button:text('Log out')");
  await page.waitForSelector("#login", { timeout: 30000 });
  const databases = await page.evaluate(async () => (await indexedDB.databases()).map((d) => d.name));
  if (databases.includes("bothy.terminal.pins")) throw new Error(`pins kept after logout: ${databases}`);
  const stored = await page.evaluate(() => JSON.stringify({ local: { ...localStorage }, session: { ...sessionStorage } }));
  if (stored !== '{"local":{},"session":{}}') throw new Error(`storage after logout: ${stored}`);

  step("enroll in the console with a new code: password, passkey, TOTP");
  const code = (await ask("CODE?")).replace(/^CODE /, "");
  await page.goto(`${base}/#/enroll`);
  await page.fill("input[name=code]", code);
  await page.fill("input[name=password]", "a console password 2026");
  await page.fill("input[name=password2]", "a console password 2026");
  await page.click("#enroll button[type=submit]");
  await page.waitForSelector("[data-totp-secret]", { timeout: 30000 });
  const secret = (await page.textContent("[data-totp-secret]")).trim();
  const answer = await ask(`TOTP_SECRET ${secret}`);
  await page.fill("input[name=totp]", answer.replace(/^TOTP /, ""));
  await page.click("#confirm button[type=submit]");
  await page.waitForSelector("text=Enrolled.", { timeout: 30000 });
  await page.goto(`${base}/#/login`);
  await page.fill("input[name=username]", owner);
  await page.fill("input[name=password]", "a console password 2026");
  await page.click("#login button[type=submit]");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });

  step("another passkey from the console: a step-up with the first, the new one on another authenticator, then a login with it");
  await page.click("button:text('Add a passkey')");
  await page.waitForSelector("[data-add-passkey='create']", { timeout: 30000 });
  // The new passkey lives on a second authenticator; the first goes away, so
  // the login below can only be the new passkey's.
  const spare = await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: { protocol: "ctap2", transport: "usb", hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });
  await cdp.send("WebAuthn.removeVirtualAuthenticator", { authenticatorId });
  await page.click("[data-add-passkey='create']");
  await page.waitForSelector("[data-notice='another-passkey-added']", { timeout: 30000 });
  const spareCredentials = (await cdp.send("WebAuthn.getCredentials", { authenticatorId: spare.authenticatorId })).credentials;
  if (spareCredentials.length !== 1) throw new Error(`the new passkey: ${spareCredentials.length} credentials on the spare authenticator`);
  const signedBefore = spareCredentials[0].signCount;
  await page.click("button:text('Log out')");
  await page.waitForSelector("#login", { timeout: 30000 });
  await page.fill("input[name=username]", owner);
  await page.fill("input[name=password]", "a console password 2026");
  await page.click("#login button[type=submit]");
  await page.waitForSelector("tr[data-host]", { timeout: 30000 });
  if ((await cdp.send("WebAuthn.getCredentials", { authenticatorId: spare.authenticatorId })).credentials[0].signCount <= signedBefore) {
    throw new Error("the login did not use the new passkey");
  }
  await page.click("button:text('Log out')");
  await page.waitForSelector("#login", { timeout: 30000 });

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
