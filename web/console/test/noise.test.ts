// The console's Noise (src/noise) against the shared test vectors (TM-T01,
// TypeScript half) and the refusals of bothy-noise.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";

import {
  HANDSHAKE_OVERHEAD,
  Initiator,
  MAX_MESSAGE1_PAYLOAD_LEN,
  MAX_MESSAGE2_PAYLOAD_LEN,
  MAX_MESSAGE_LEN,
  MAX_TRANSPORT_PLAINTEXT_LEN,
  NoiseError,
  PROTOCOL_NAME,
  Responder,
  Transport,
  prologue,
  publicKey,
  randomPrivateKey,
  type NoiseErrorCode,
} from "../src/noise/index.js";
import { fromHex, toHex } from "../src/bytes.js";

/** The repository's ../shared/testdata/noise/vectors (beside the worktree). */
const VECTORS = fileURLToPath(new URL("../../../../shared/testdata/noise/vectors/", import.meta.url));

interface VectorMessage {
  payload: string;
  ciphertext: string;
}
interface Vector {
  protocol_name?: string;
  name?: string;
  init_prologue: string;
  resp_prologue: string;
  init_ephemeral: string;
  resp_ephemeral: string;
  resp_static: string;
  init_remote_static: string;
  handshake_hash?: string;
  messages: VectorMessage[];
}

function load(file: string): Vector[] {
  // A missing file throws here: TM-T01 fails, it never skips.
  const text = gunzipSync(readFileSync(VECTORS + file)).toString("utf8");
  const document = JSON.parse(text) as { vectors: Vector[] };
  assert.ok(Array.isArray(document.vectors), `${file}: a "vectors" array`);
  return document.vectors;
}

function runEntry(entry: Vector): number {
  assert.equal(entry.init_prologue, entry.resp_prologue);
  const prologueBytes = fromHex(entry.init_prologue);
  const hostPrivate = fromHex(entry.resp_static);
  assert.equal(toHex(publicKey(hostPrivate)), entry.init_remote_static.toLowerCase(), "the vector's host key pair");
  const initiator = new Initiator(prologueBytes, fromHex(entry.init_remote_static), fromHex(entry.init_ephemeral));
  const responder = new Responder(prologueBytes, hostPrivate, fromHex(entry.resp_ephemeral));
  const messages = entry.messages;
  assert.ok(messages.length >= 2, "an NK entry has both handshake messages");
  const part = (i: number): [Uint8Array, Uint8Array] => {
    const m = messages[i];
    assert.ok(m !== undefined);
    return [fromHex(m.payload), fromHex(m.ciphertext)];
  };

  let [payload, ciphertext] = part(0);
  assert.equal(toHex(initiator.writeMessage1(payload)), toHex(ciphertext), "message 1");
  const message1 = responder.readMessage1(ciphertext);
  assert.equal(toHex(message1.payload), toHex(payload));
  assert.equal(toHex(message1.initiatorEphemeral), toHex(initiator.ephemeralPublic));

  [payload, ciphertext] = part(1);
  const { message: message2, transport: hostSide } = responder.writeMessage2(payload);
  assert.equal(toHex(message2), toHex(ciphertext), "message 2");
  const { payload: received, transport: deviceSide } = initiator.readMessage2(ciphertext);
  assert.equal(toHex(received), toHex(payload));

  if (entry.handshake_hash !== undefined) {
    assert.equal(toHex(deviceSide.handshakeHash), entry.handshake_hash.toLowerCase(), "initiator handshake hash");
    assert.equal(toHex(hostSide.handshakeHash), entry.handshake_hash.toLowerCase(), "responder handshake hash");
  }
  for (let i = 2; i < messages.length; i++) {
    [payload, ciphertext] = part(i);
    const [sender, receiver] = i % 2 === 0 ? [deviceSide, hostSide] : [hostSide, deviceSide];
    assert.equal(toHex(sender.writeMessage(payload)), toHex(ciphertext), `message ${i + 1}`);
    assert.equal(toHex(receiver.readMessage(ciphertext)), toHex(payload), `message ${i + 1}`);
  }
  return messages.length;
}

function checkFile(file: string, field: "protocol_name" | "name"): void {
  const entries = load(file).filter((entry) => entry[field] === PROTOCOL_NAME);
  let messages = 0;
  for (const entry of entries) {
    messages += runEntry(entry);
  }
  console.log(`TM-T01 (TypeScript) ${file}: ${entries.length} entries, ${messages} messages`);
  assert.ok(entries.length > 0, `${file} holds no ${PROTOCOL_NAME} entry`);
  assert.ok(messages > 0, `${file}: no messages checked`);
}

test("TM-T01 TypeScript: cacophony vectors byte for byte", () => {
  checkFile("cacophony.txt.gz", "protocol_name");
});

test("TM-T01 TypeScript: noise-c vectors byte for byte", () => {
  checkFile("noise-c-basic.txt.gz", "name");
});

// ---- refusals (those of bothy-noise) ----

const SESSION = "01234567-89ab-cdef-0123-456789abcdef";
const HOST = "fedcba98-7654-3210-fedc-ba9876543210";
/** A public key of order 8 (the one of bothy-noise's dh tests). */
const ORDER_8 = fromHex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800");
const SMALL_ORDER_KEYS = [
  new Uint8Array(32),
  Uint8Array.of(1, ...new Array<number>(31).fill(0)),
  ORDER_8,
  fromHex("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
  fromHex("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
];

function refused(call: () => unknown, code: NoiseErrorCode): void {
  assert.throws(call, (error: unknown) => error instanceof NoiseError && error.code === code, `expected ${code}`);
}

function pair(): { device: Transport; host: Transport } {
  const hostPrivate = randomPrivateKey();
  const initiator = Initiator.create(SESSION, HOST, publicKey(hostPrivate));
  const responder = Responder.create(SESSION, HOST, hostPrivate);
  responder.readMessage1(initiator.writeMessage1(new TextEncoder().encode("token")));
  const { message, transport: host } = responder.writeMessage2(new TextEncoder().encode("{}"));
  const { transport: device } = initiator.readMessage2(message);
  return { device, host };
}

test("prologue: label, then session and host ID in text order", () => {
  const bytes = prologue(SESSION, HOST);
  assert.equal(new TextDecoder().decode(bytes.subarray(0, 16)), "bothy-terminal/1");
  assert.equal(toHex(bytes.subarray(16, 32)), "0123456789abcdef0123456789abcdef");
  assert.equal(toHex(bytes.subarray(32)), "fedcba9876543210fedcba9876543210");
  assert.throws(() => prologue("not-a-uuid", HOST), TypeError);
});

test("a host key of small order fails message 1 and poisons the initiator", () => {
  for (const key of SMALL_ORDER_KEYS) {
    const initiator = Initiator.create(SESSION, HOST, key);
    refused(() => initiator.writeMessage1(new Uint8Array(0)), "small_order_public_key");
    refused(() => initiator.writeMessage1(new Uint8Array(0)), "poisoned");
    refused(() => initiator.readMessage2(new Uint8Array(64)), "poisoned");
  }
});

test("an ephemeral key of small order in message 1 or 2 is refused", () => {
  const hostPrivate = randomPrivateKey();
  for (const key of SMALL_ORDER_KEYS) {
    const responder = Responder.create(SESSION, HOST, hostPrivate);
    const forged = new Uint8Array(HANDSHAKE_OVERHEAD);
    forged.set(key);
    refused(() => responder.readMessage1(forged), "small_order_public_key");
    refused(() => responder.writeMessage2(new Uint8Array(0)), "poisoned");

    const initiator = Initiator.create(SESSION, HOST, publicKey(hostPrivate));
    initiator.writeMessage1(new Uint8Array(0));
    refused(() => initiator.readMessage2(forged), "small_order_public_key");
    refused(() => initiator.readMessage2(forged), "poisoned");
  }
});

test("size limits of handshake and transport messages", () => {
  const hostPrivate = randomPrivateKey();
  const initiator = Initiator.create(SESSION, HOST, publicKey(hostPrivate));
  refused(() => initiator.writeMessage1(new Uint8Array(MAX_MESSAGE1_PAYLOAD_LEN + 1)), "payload_too_long");
  refused(() => initiator.writeMessage1(new Uint8Array(0)), "poisoned");

  // The largest token fits exactly into the largest message.
  const big = Initiator.create(SESSION, HOST, publicKey(hostPrivate));
  const message1 = big.writeMessage1(new Uint8Array(MAX_MESSAGE1_PAYLOAD_LEN));
  assert.equal(message1.length, MAX_MESSAGE_LEN);
  const responder = Responder.create(SESSION, HOST, hostPrivate);
  assert.equal(responder.readMessage1(message1).payload.length, MAX_MESSAGE1_PAYLOAD_LEN);
  refused(() => responder.writeMessage2(new Uint8Array(MAX_MESSAGE2_PAYLOAD_LEN + 1)), "payload_too_long");

  const tooLong = Responder.create(SESSION, HOST, hostPrivate);
  refused(() => tooLong.readMessage1(new Uint8Array(MAX_MESSAGE_LEN + 1)), "message_too_long");
  refused(() => tooLong.readMessage1(message1), "poisoned");
  const tooShort = Responder.create(SESSION, HOST, hostPrivate);
  refused(() => tooShort.readMessage1(new Uint8Array(HANDSHAKE_OVERHEAD - 1)), "message_too_short");

  const { device, host } = pair();
  // A refused write changes nothing and does not poison.
  refused(() => device.writeMessage(new Uint8Array(MAX_TRANSPORT_PLAINTEXT_LEN + 1)), "payload_too_long");
  const full = device.writeMessage(new Uint8Array(MAX_TRANSPORT_PLAINTEXT_LEN));
  assert.equal(full.length, MAX_MESSAGE_LEN);
  assert.equal(host.readMessage(full).length, MAX_TRANSPORT_PLAINTEXT_LEN);
  // An empty plaintext is the tag alone.
  assert.equal(host.readMessage(device.writeMessage(new Uint8Array(0))).length, 0);
  refused(() => host.readMessage(new Uint8Array(MAX_MESSAGE_LEN + 1)), "message_too_long");
  refused(() => host.writeMessage(new Uint8Array(1)), "poisoned");
  const other = pair();
  refused(() => other.host.readMessage(new Uint8Array(15)), "message_too_short");
  refused(() => other.host.readMessage(other.device.writeMessage(new Uint8Array(1))), "poisoned");
});

test("handshake steps out of order are refused and poison", () => {
  const hostPrivate = randomPrivateKey();
  const initiator = Initiator.create(SESSION, HOST, publicKey(hostPrivate));
  refused(() => initiator.readMessage2(new Uint8Array(64)), "out_of_order");
  refused(() => initiator.writeMessage1(new Uint8Array(0)), "poisoned");
  const responder = Responder.create(SESSION, HOST, hostPrivate);
  refused(() => responder.writeMessage2(new Uint8Array(0)), "out_of_order");
  refused(() => responder.readMessage1(new Uint8Array(64)), "poisoned");

  const done = Initiator.create(SESSION, HOST, publicKey(hostPrivate));
  const host = Responder.create(SESSION, HOST, hostPrivate);
  host.readMessage1(done.writeMessage1(new Uint8Array(0)));
  done.readMessage2(host.writeMessage2(new Uint8Array(0)).message);
  refused(() => done.readMessage2(new Uint8Array(64)), "out_of_order");
  refused(() => done.writeMessage1(new Uint8Array(0)), "poisoned");
});

test("a wrong prologue or host key fails message 1 with decrypt and poisons", () => {
  const hostPrivate = randomPrivateKey();
  const cases: Array<[string, Initiator]> = [
    ["session", Initiator.create("01234567-89ab-cdef-0123-456789abcdee", HOST, publicKey(hostPrivate))],
    ["host", Initiator.create(SESSION, "fedcba98-7654-3210-fedc-ba9876543211", publicKey(hostPrivate))],
    ["key", Initiator.create(SESSION, HOST, publicKey(randomPrivateKey()))],
  ];
  for (const [what, initiator] of cases) {
    const responder = Responder.create(SESSION, HOST, hostPrivate);
    const message1 = initiator.writeMessage1(new TextEncoder().encode("token"));
    assert.throws(() => responder.readMessage1(message1), (e: unknown) => e instanceof NoiseError && e.code === "decrypt", what);
    refused(() => responder.writeMessage2(new Uint8Array(0)), "poisoned");
  }
});

test("an altered message 2 or transport message fails and poisons both directions", () => {
  const hostPrivate = randomPrivateKey();
  const initiator = Initiator.create(SESSION, HOST, publicKey(hostPrivate));
  const responder = Responder.create(SESSION, HOST, hostPrivate);
  responder.readMessage1(initiator.writeMessage1(new Uint8Array(0)));
  const { message } = responder.writeMessage2(new TextEncoder().encode("{}"));
  const altered = message.slice();
  altered[altered.length - 1] = (altered[altered.length - 1] ?? 0) ^ 1;
  refused(() => initiator.readMessage2(altered), "decrypt");
  refused(() => initiator.readMessage2(message), "poisoned");

  const { device, host } = pair();
  const frame = device.writeMessage(new TextEncoder().encode("frame"));
  frame[0] = (frame[0] ?? 0) ^ 0x80;
  refused(() => host.readMessage(frame), "decrypt");
  refused(() => host.readMessage(device.writeMessage(new Uint8Array(1))), "poisoned");
  refused(() => host.writeMessage(new Uint8Array(1)), "poisoned");
  // A replayed message fails too: the receive counter moved on.
  const again = pair();
  const once = again.device.writeMessage(new Uint8Array(3));
  again.host.readMessage(once);
  refused(() => again.host.readMessage(once), "decrypt");
});

test("a transport message read in place: the same plaintext in the message's own bytes; a refused one is left as it was", () => {
  const { device, host } = pair();
  const payload = new TextEncoder().encode("output of a burst");
  const sealed = device.writeMessage(payload);
  const plaintext = host.readMessageInPlace(sealed);
  assert.equal(toHex(plaintext), toHex(payload));
  assert.equal(plaintext.buffer, sealed.buffer);
  assert.equal(plaintext.byteOffset, sealed.byteOffset);
  // The next message, altered: refused, unchanged, and the transport poisoned.
  const next = device.writeMessage(payload);
  next[next.length - 1] = (next[next.length - 1] ?? 0) ^ 1;
  const before = toHex(next);
  refused(() => host.readMessageInPlace(next), "decrypt");
  assert.equal(toHex(next), before);
  refused(() => host.readMessageInPlace(device.writeMessage(payload)), "poisoned");
  // Both ways of reading keep one counter.
  const mixed = pair();
  mixed.host.readMessage(mixed.device.writeMessage(payload));
  assert.equal(toHex(mixed.host.readMessageInPlace(mixed.device.writeMessage(payload))), toHex(payload));
  refused(() => pair().host.readMessageInPlace(new Uint8Array(15)), "message_too_short");
});

test("nonce 2^64-2 works once, 2^64-1 is refused both ways without poisoning the other direction", () => {
  const { device, host } = pair();
  const last = 0xffff_ffff_ffff_fffen;
  device.setNoncesForTest(last, last);
  host.setNoncesForTest(last, last);
  const toHost = device.writeMessage(new TextEncoder().encode("last one"));
  assert.equal(new TextDecoder().decode(host.readMessage(toHost)), "last one");
  const toDevice = host.writeMessage(new TextEncoder().encode("last back"));
  assert.equal(new TextDecoder().decode(device.readMessage(toDevice)), "last back");
  refused(() => device.writeMessage(new Uint8Array(1)), "nonce_exhausted");
  refused(() => host.writeMessage(new Uint8Array(1)), "nonce_exhausted");
  refused(() => host.readMessage(toHost), "nonce_exhausted");
  refused(() => device.readMessage(toDevice), "nonce_exhausted");
  assert.equal(device.poisoned, false);

  const one = pair();
  one.device.setNoncesForTest(0xffff_ffff_ffff_ffffn, 0n);
  refused(() => one.device.writeMessage(new Uint8Array(1)), "nonce_exhausted");
  const back = one.host.writeMessage(new TextEncoder().encode("still fine"));
  assert.equal(new TextDecoder().decode(one.device.readMessage(back)), "still fine");
});
