import { chromium } from "playwright-core";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { randomBytes } from "node:crypto";
const req = createRequire(import.meta.url);
const xterm = readFileSync(req.resolve("@xterm/xterm/lib/xterm.js"), "utf8");
const css = readFileSync(req.resolve("@xterm/xterm/css/xterm.css"), "utf8");
const b64 = randomBytes(16*1024*1024).toString("base64").replace(/(.{76})/g, "$1\r\n");
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
await page.setContent(`<html><head><style>${css}</style></head><body><div id=t style="width:1200px;height:700px"></div></body></html>`);
await page.evaluate(xterm);
await page.evaluate((s) => { window.__s = s; window.__b = new TextEncoder().encode(s); }, b64);
for (let r = 0; r < 6; r++) for (const kind of ["string", "bytes"]) {
  const took = await page.evaluate((kind) => new Promise((resolve) => {
    const holder = document.getElementById("t");
    const term = new window.Terminal({ cursorBlink: false, scrollback: 5000, fontSize: 14, cols: 140, rows: 40 });
    term.open(holder);
    const data = kind === "string" ? window.__s : window.__b;
    const t0 = performance.now(); const chunk = 65536; let at = 0;
    while (at < data.length) { const piece = data.slice(at, at + chunk); at += chunk; if (at >= data.length) term.write(piece, () => requestAnimationFrame(() => { const t = performance.now() - t0; term.dispose(); resolve(t); })); else term.write(piece); }
  }), kind);
  console.log(kind, (b64.length / 1048576 / (took / 1000)).toFixed(1), "MiB/s");
}
await browser.close();
