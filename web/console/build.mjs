// Builds the console into dist/ (what bothy-server embeds, see
// crates/server/src/http/console.rs) and, with --tests, the unit tests into
// dist-test/. The output is deterministic: the same sources and lock file give
// the same bytes, which CI checks against the committed dist/.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(fileURLToPath(import.meta.url));
const tests = process.argv.includes("--tests");

async function console_bundle() {
  const out = join(root, "dist");
  rmSync(out, { recursive: true, force: true });
  mkdirSync(join(out, "assets"), { recursive: true });
  await build({
    entryPoints: { console: join(root, "src/main.ts"), "stream-worker": join(root, "src/stream_worker.ts") },
    bundle: true,
    format: "iife",
    platform: "browser",
    target: ["es2022"],
    minify: true,
    legalComments: "eof",
    charset: "utf8",
    outdir: join(out, "assets"),
    logLevel: "warning",
  });
  await build({
    entryPoints: { console: join(root, "src/style.css") },
    bundle: true,
    minify: true,
    legalComments: "eof",
    charset: "utf8",
    outdir: join(out, "assets"),
    logLevel: "warning",
  });
  copyFileSync(join(root, "index.html"), join(out, "index.html"));
}

async function test_bundle() {
  const out = join(root, "dist-test");
  rmSync(out, { recursive: true, force: true });
  const entries = readdirSync(join(root, "test"))
    .filter((name) => name.endsWith(".test.ts"))
    .map((name) => join(root, "test", name));
  await build({
    entryPoints: entries,
    bundle: true,
    format: "esm",
    platform: "node",
    target: ["node20"],
    outdir: out,
    outExtension: { ".js": ".mjs" },
    packages: "external",
    logLevel: "warning",
  });
}

if (tests) {
  await test_bundle();
} else {
  await console_bundle();
}
