// The console's output filter (src/filter) against the shared cases of
// tests/filter-cases.json (also read by crates/cli's Rust tests), every case
// whole and split at every position; plus the Rust unit tests' properties.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

import { MAX_STRING, OutputFilter } from "../src/filter/index.js";

const CASES = fileURLToPath(new URL("../../../tests/filter-cases.json", import.meta.url));

interface Case {
  name: string;
  encoding: "utf8" | "bytes";
  input: string;
  output: string;
}

function bytes(text: string, encoding: string): Uint8Array {
  if (encoding === "utf8") {
    return new TextEncoder().encode(text);
  }
  assert.equal(encoding, "bytes");
  return Uint8Array.from(Array.from(text, (c) => {
    const code = c.codePointAt(0) ?? 0;
    assert.ok(code <= 0xff, "a byte case holds U+0000..U+00FF only");
    return code;
  }));
}

function run(...parts: Uint8Array[]): Uint8Array {
  const filter = new OutputFilter();
  const out: number[] = [];
  for (const part of parts) {
    out.push(...filter.filter(part));
  }
  out.push(...filter.finish());
  return Uint8Array.from(out);
}

function runBytewise(input: Uint8Array): Uint8Array {
  const filter = new OutputFilter();
  return Uint8Array.from([...filter.filterBytewise(input), ...filter.finish()]);
}

const show = (b: Uint8Array) => JSON.stringify(Array.from(b, (x) => String.fromCharCode(x)).join(""));

test("shared filter cases (tests/filter-cases.json), whole and split at every position", () => {
  const document = JSON.parse(readFileSync(CASES, "utf8")) as { cases: Case[] };
  assert.ok(document.cases.length >= 30, "the shared file holds its cases");
  for (const c of document.cases) {
    const input = bytes(c.input, c.encoding);
    const expected = bytes(c.output, c.encoding);
    assert.equal(show(run(input)), show(expected), c.name);
    for (let cut = 0; cut <= input.length; cut++) {
      assert.equal(show(run(input.subarray(0, cut), input.subarray(cut))), show(expected), `${c.name}, split at ${cut}`);
    }
  }
  console.log(`filter cases: ${document.cases.length} shared cases`);
});

test("an overlong OSC 52 is dropped without buffering it", () => {
  const head = new TextEncoder().encode("\x1b]52;c;");
  const body = new Uint8Array(MAX_STRING + 10).fill(0x41);
  const tail = new TextEncoder().encode("\x07ok");
  assert.equal(new TextDecoder().decode(run(head, body, tail)), "ok");
});

function xorshift(seed: bigint): () => bigint {
  let state = seed;
  const mask = (1n << 64n) - 1n;
  return () => {
    state ^= (state << 13n) & mask;
    state ^= state >> 7n;
    state ^= (state << 17n) & mask;
    return state;
  };
}

function mix(next: () => bigint, pieces: Uint8Array[], most: bigint): Uint8Array {
  const out: number[] = [];
  const count = Number(next() % most);
  for (let i = 0; i < count; i++) {
    out.push(...(pieces[Number(next() % BigInt(pieces.length))] ?? []));
  }
  return Uint8Array.from(out);
}

const latin1 = (s: string) => Uint8Array.from(Array.from(s, (c) => c.charCodeAt(0)));
const utf8 = (s: string) => new TextEncoder().encode(s);

test("differential: copying plain runs whole changes nothing", () => {
  const next = xorshift(0x2545f4914f6cdd1dn);
  const pieces = [
    utf8("plain text "), utf8("\r\n"), utf8("\t"), utf8("\x08"), utf8("\x07"), utf8("\x7f"), utf8("\x00"), utf8("\x18"),
    utf8("\u00e9\u2500\u{1f600}"), utf8("\u0085"), latin1("\x9b"), latin1("\xc2"), latin1("\xe2\x94"), latin1("\xff"),
    // The bounds of the second byte after E0, ED, F0 and F4, on both sides.
    latin1("\xe0\x9f\x80"), latin1("\xe0\xa0\x80"), latin1("\xed\x9f\xbf"), latin1("\xed\xa0\x80"),
    latin1("\xf0\x8f\xbf\xbf"), latin1("\xf0\x90\x80\x80"), latin1("\xf4\x8f\xbf\xbf"), latin1("\xf4\x90\x80\x80"),
    latin1("\xc2\x9f"), latin1("\xc2\xa0"), latin1("\xe2\x94\x41"),
    utf8("\x1b[1;34m"), utf8("\x1b[0m"), utf8("\x1b[21t"), utf8("\x1b]52;c;QQ==\x07"), utf8("\x1b]8;;http://x\x1b\\"),
    utf8("\x1b]8;;\x07"), utf8("\x1b]0;title\x1b\\"), utf8("\x1bP1$r\x1b\\"), utf8("\x1b_apc\x1b\\"), utf8("\x1b\\"), utf8("\x1b"),
  ];
  for (let i = 0; i < 3000; i++) {
    const input = mix(next, pieces, 16n);
    const cut = Number(next() % BigInt(input.length + 1));
    assert.equal(show(run(input.subarray(0, cut), input.subarray(cut))), show(runBytewise(input)), show(input));
  }
});

test("output that passes whole comes back as it is, not copied", () => {
  const filter = new OutputFilter();
  const plain = utf8("a burst of output \u2500\u{1f600}\r\n");
  assert.equal(filter.filter(plain), plain);
  // After a sequence that was dropped, and with one split across two calls,
  // the same holds once the filter is at rest again.
  assert.equal(show(filter.filter(utf8("x\x1b]52;c;QQ==\x07y"))), show(utf8("xy")));
  assert.equal(filter.filter(utf8("\x1b[1")).length, 0);
  assert.equal(show(filter.filter(utf8("m"))), show(utf8("\x1b[1m")));
  assert.equal(filter.filter(plain), plain);
});

test("property: what passes passes again unchanged, and never holds OSC 52, OSC 8 or a title report", () => {
  const next = xorshift(0x9e3779b97f4a7c15n);
  const pieces = [
    "\x1b]52;c;QQ==\x07", "\x1b]52;c;QQ==", "\x1b[21t", "\x1b[20t", "\x1b]8;;http://x\x1b\\", "\x1b]8;;\x07", "\x1b[", "\x1b]",
    "\x1b", "\x1b\\", "\x07", "text", "\u00e9", "\x1b[0m", "2", "1t", ";", "\x18",
  ].map(utf8);
  for (let i = 0; i < 2000; i++) {
    const input = mix(next, pieces, 12n);
    const out = run(input);
    assert.equal(show(run(out)), show(out), show(input));
    const text = new TextDecoder().decode(out);
    assert.ok(!text.includes("\x1b]52"), text);
    assert.ok(!text.includes("\x1b[21t") && !text.includes("\x1b[20t"), text);
    assert.ok(!text.includes("\x1b]8;"), text);
  }
  for (let i = 0; i < 300; i++) {
    const len = Number(next() % 64n);
    const input = Uint8Array.from({ length: len }, () => Number(next() % 0x5fn) + 0x20);
    for (let cut = 0; cut <= input.length; cut++) {
      assert.equal(show(run(input.subarray(0, cut), input.subarray(cut))), show(input));
    }
  }
});

test("differential against the Rust filter of crates/cli on pseudo-random output", async () => {
  const { cargoExample } = await import("./support/cargo.js");
  const { spawnSync } = await import("node:child_process");
  const { toHex } = await import("../src/bytes.js");
  const next = xorshift(0x0123456789abcdefn);
  const pieces = [
    "plain ", "\r\n", "\x07", "\x18", "\x1a", "\x7f", "\x1b", "\x1b\\", "\x1b[", "\x1b]", "\x1bP", "\x1b_", "\x1b(", "\x1b ",
    "\x1b[21t", "\x1b[?21t", "\x1b[20;1t", "\x1b[1;2;3m", "\x1b[<1;2M", "\x1b[38:2:1:2:3m", "\x1b]52;c;QQ==\x07",
    "\x1b]8;;http://x;y\x1b\\", "\x1b]8;id=2;\x07", "\x1b]0;t\x07", "\x1bP1$rq\x1b\\", "\x1bP$q", "21", ";", ":", "t", "?",
    "\u00e9", "\u{1f600}", "\u0085", "\u009b",
  ].map(utf8);
  const raw = [latin1("\x9b"), latin1("\x9c"), latin1("\x9d"), latin1("\xc2"), latin1("\xe0\x80"), latin1("\xed\xa0"), latin1("\xf4\x90"), latin1("\xff")];
  const inputs: Uint8Array[] = [];
  for (let i = 0; i < 3000; i++) {
    inputs.push(mix(next, [...pieces, ...raw], 24n));
  }
  const result = spawnSync(cargoExample("filter_lines"), {
    input: inputs.map((b) => toHex(b)).join("\n") + "\n",
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  assert.equal(result.status, 0, result.stderr);
  const lines = result.stdout.split("\n");
  inputs.forEach((input, i) => {
    assert.equal(toHex(run(input)), lines[i], `input ${show(input)}`);
  });
});
