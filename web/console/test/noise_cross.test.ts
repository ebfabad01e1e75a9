// TM-T02, TypeScript half: the console's Noise against bothy-noise, both
// directions, with the right and a wrong prologue and key. The Rust side is
// the test-only example crates/noise/examples/noise_peer.rs, speaking lines
// of hex over stdin/stdout; this test builds it with cargo (a no-op after
// scripts/test's cargo test) and fails if it cannot.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";

import { Initiator, NoiseError, Responder, publicKey, randomPrivateKey } from "../src/noise/index.js";
import { fromHex, toHex } from "../src/bytes.js";
import { cargoExample } from "./support/cargo.js";

let peerPath = "";

before(() => {
  peerPath = cargoExample("noise_peer");
});

class Peer {
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #lines: string[] = [];
  readonly #waiting: Array<(line: string) => void> = [];

  constructor(args: string[]) {
    this.#child = spawn(peerPath, args);
    this.#child.stderr.on("data", (chunk: Buffer) => process.stderr.write(chunk));
    createInterface({ input: this.#child.stdout }).on("line", (line) => {
      const waiter = this.#waiting.shift();
      if (waiter) {
        waiter(line);
      } else {
        this.#lines.push(line);
      }
    });
  }

  next(): Promise<string> {
    const line = this.#lines.shift();
    if (line !== undefined) {
      return Promise.resolve(line);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("noise_peer said nothing")), 20_000);
      this.#waiting.push((l) => {
        clearTimeout(timer);
        resolve(l);
      });
    });
  }

  async expect(tag: string): Promise<Uint8Array> {
    const line = await this.next();
    const [got, hex] = line.split(" ");
    assert.equal(got, tag, `noise_peer: ${line}`);
    return fromHex(hex ?? "");
  }

  send(bytes: Uint8Array): void {
    this.#child.stdin.write(toHex(bytes) + "\n");
  }

  async end(): Promise<number | null> {
    this.#child.stdin.end();
    if (this.#child.exitCode !== null) {
      return this.#child.exitCode;
    }
    return new Promise((resolve) => this.#child.on("exit", (code) => resolve(code)));
  }
}

const SESSION = "0193b2a4-0000-7000-8000-00000000a001";
const HOST = "0193b2a4-0000-7000-8000-00000000b002";
const OTHER = "0193b2a4-0000-7000-8000-00000000c003";
const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

test("TM-T02: TypeScript initiator, Rust responder, right prologue and key", async () => {
  const hostPrivate = randomPrivateKey();
  const peer = new Peer(["responder", SESSION, HOST, toHex(hostPrivate)]);
  const initiator = Initiator.create(SESSION, HOST, publicKey(hostPrivate));
  peer.send(initiator.writeMessage1(enc("the token")));
  assert.equal(dec(await peer.expect("token")), "the token");
  const { payload, transport } = initiator.readMessage2(await peer.expect("message2"));
  assert.equal(dec(payload), '{"peer":"rust"}');
  for (const text of ["frame one", "", "x".repeat(60_000)]) {
    peer.send(transport.writeMessage(enc(text)));
    assert.equal(dec(transport.readMessage(await peer.expect("transport"))), "echo:" + text);
  }
  assert.equal(await peer.end(), 0);
});

test("TM-T02: TypeScript initiator, Rust responder, wrong prologue or key: decrypt", async () => {
  const hostPrivate = randomPrivateKey();
  const cases: Array<[string, Initiator]> = [
    ["session", Initiator.create(OTHER, HOST, publicKey(hostPrivate))],
    ["host", Initiator.create(SESSION, OTHER, publicKey(hostPrivate))],
    ["key", Initiator.create(SESSION, HOST, publicKey(randomPrivateKey()))],
  ];
  for (const [what, initiator] of cases) {
    const peer = new Peer(["responder", SESSION, HOST, toHex(hostPrivate)]);
    peer.send(initiator.writeMessage1(enc("the token")));
    assert.equal(await peer.next(), "error decrypt", what);
    assert.equal(await peer.end(), 0);
  }
});

test("TM-T02: Rust initiator, TypeScript responder, right prologue and key", async () => {
  const hostPrivate = randomPrivateKey();
  const peer = new Peer(["initiator", SESSION, HOST, toHex(publicKey(hostPrivate)), toHex(enc("rust token"))]);
  const responder = Responder.create(SESSION, HOST, hostPrivate);
  const message1 = responder.readMessage1(await peer.expect("message1"));
  assert.equal(dec(message1.payload), "rust token");
  const { message, transport } = responder.writeMessage2(enc('{"peer":"ts"}'));
  peer.send(message);
  assert.equal(dec(await peer.expect("payload")), '{"peer":"ts"}');
  assert.equal(dec(transport.readMessage(await peer.expect("transport"))), "ping");
  peer.send(transport.writeMessage(enc("pong")));
  assert.equal(dec(await peer.expect("reply")), "pong");
  assert.equal(await peer.end(), 0);
});

test("TM-T02: Rust initiator, TypeScript responder, wrong prologue or key: decrypt", async () => {
  const hostPrivate = randomPrivateKey();
  const cases: Array<[string, string[]]> = [
    ["session", ["initiator", OTHER, HOST, toHex(publicKey(hostPrivate)), "00"]],
    ["host", ["initiator", SESSION, OTHER, toHex(publicKey(hostPrivate)), "00"]],
    ["key", ["initiator", SESSION, HOST, toHex(publicKey(randomPrivateKey())), "00"]],
  ];
  for (const [what, args] of cases) {
    const peer = new Peer(args);
    const responder = Responder.create(SESSION, HOST, hostPrivate);
    const message1 = await peer.expect("message1");
    assert.throws(
      () => responder.readMessage1(message1),
      (e: unknown) => e instanceof NoiseError && e.code === "decrypt",
      what,
    );
    await peer.end();
  }
});

test("TM-T02: an altered message 2 from TypeScript fails in Rust with decrypt", async () => {
  const hostPrivate = randomPrivateKey();
  const peer = new Peer(["initiator", SESSION, HOST, toHex(publicKey(hostPrivate)), "01"]);
  const responder = Responder.create(SESSION, HOST, hostPrivate);
  responder.readMessage1(await peer.expect("message1"));
  const { message } = responder.writeMessage2(enc("{}"));
  message[40] = (message[40] ?? 0) ^ 1;
  peer.send(message);
  assert.equal(await peer.next(), "error decrypt");
  assert.equal(await peer.end(), 0);
});
