// Noise_NK_25519_ChaChaPoly_SHA256 for the terminal stream (spec 24, 5.2): the
// console's twin of the Rust crate bothy-noise, on @noble/curves,
// @noble/ciphers and @noble/hashes only.
//
// The tab is the Initiator: it draws its ephemeral key before the open request
// (the request carries SHA-256 of it, client_ephemeral_key_hash), sends the
// terminal session token in message 1 and reads the host's JSON from
// message 2. The Responder exists for the cross tests (TM-T02) and the vectors.
//
// The refusals are those of bothy-noise: every message is at most 65535 bytes;
// an X25519 result from a public key of small order fails the handshake; a
// failed handshake step poisons the object; a failed transport read poisons
// both directions; each direction refuses the nonce 2^64 - 1.

import { x25519 } from "@noble/curves/ed25519.js";
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { hmac } from "@noble/hashes/hmac.js";

export const PROTOCOL_NAME = "Noise_NK_25519_ChaChaPoly_SHA256";
export const KEY_LEN = 32;
export const TAG_LEN = 16;
export const MAX_MESSAGE_LEN = 65535;
export const MAX_TRANSPORT_PLAINTEXT_LEN = MAX_MESSAGE_LEN - TAG_LEN;
export const HANDSHAKE_OVERHEAD = KEY_LEN + TAG_LEN;
export const MAX_MESSAGE1_PAYLOAD_LEN = MAX_MESSAGE_LEN - HANDSHAKE_OVERHEAD;
export const MAX_MESSAGE2_PAYLOAD_LEN = MAX_MESSAGE_LEN - HANDSHAKE_OVERHEAD;
export const HANDSHAKE_HASH_LEN = 32;
export const PROLOGUE_LABEL = "bothy-terminal/1";

/** The last nonce, never used (section 5.1 of the Noise specification). */
const NONCE_MAX = 0xffff_ffff_ffff_ffffn;

export type NoiseErrorCode =
  | "payload_too_long"
  | "message_too_long"
  | "message_too_short"
  | "small_order_public_key"
  | "decrypt"
  | "nonce_exhausted"
  | "poisoned"
  | "out_of_order"
  | "bad_key";

const MESSAGES: Record<NoiseErrorCode, string> = {
  payload_too_long: "payload exceeds the limit for this message",
  message_too_long: "message exceeds the Noise limit of 65535 bytes",
  message_too_short: "message is shorter than its fixed parts",
  small_order_public_key: "Diffie-Hellman refused: the peer's public key has small order",
  decrypt: "message authentication failed",
  nonce_exhausted: "the nonces of this direction are used up",
  poisoned: "an earlier failure poisoned this Noise object",
  out_of_order: "handshake step called out of order",
  bad_key: "a key is not 32 bytes",
};

/** Why a Noise call was refused; carries no message content or key material. */
export class NoiseError extends Error {
  readonly code: NoiseErrorCode;
  constructor(code: NoiseErrorCode) {
    super(MESSAGES[code]);
    this.name = "NoiseError";
    this.code = code;
  }
}

/** The prologue of 5.2: label, then session ID and host ID as 16 bytes each. */
export function prologue(sessionId: string, hostId: string): Uint8Array {
  const out = new Uint8Array(16 + 16 + 16);
  out.set(new TextEncoder().encode(PROLOGUE_LABEL), 0);
  out.set(uuidBytes(sessionId), 16);
  out.set(uuidBytes(hostId), 32);
  return out;
}

/** The 16 bytes of a UUID in text order (RFC 9562). */
export function uuidBytes(uuid: string): Uint8Array {
  const hex = uuid.replace(/-/g, "");
  if (!/^[0-9a-fA-F]{32}$/.test(hex) || !/^[0-9a-fA-F-]{36}$/.test(uuid)) {
    throw new TypeError("not a UUID");
  }
  const out = new Uint8Array(16);
  for (let i = 0; i < 16; i++) {
    out[i] = Number.parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  }
  return out;
}

function checkKey(key: Uint8Array): void {
  if (key.length !== KEY_LEN) {
    throw new NoiseError("bad_key");
  }
}

/** A fresh X25519 private key from the platform's random number generator. */
export function randomPrivateKey(): Uint8Array {
  return x25519.utils.randomSecretKey();
}

/** The X25519 public key of a private key. */
export function publicKey(privateKey: Uint8Array): Uint8Array {
  checkKey(privateKey);
  return x25519.getPublicKey(privateKey);
}

/** X25519 that refuses a public key of small order (an all-zero result). */
function dh(privateKey: Uint8Array, peer: Uint8Array): Uint8Array {
  let shared: Uint8Array;
  try {
    shared = x25519.getSharedSecret(privateKey, peer);
  } catch {
    // noble refuses the low-order inputs before the ladder; both keys are
    // 32 bytes here, so this is the small-order case.
    throw new NoiseError("small_order_public_key");
  }
  let acc = 0;
  for (const byte of shared) {
    acc |= byte;
  }
  if (acc === 0) {
    throw new NoiseError("small_order_public_key");
  }
  return shared;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** HKDF of section 4.3 of the Noise specification, two outputs. */
function hkdf2(chainingKey: Uint8Array, ikm: Uint8Array): [Uint8Array, Uint8Array] {
  const tempKey = hmac(sha256, chainingKey, ikm);
  const out1 = hmac(sha256, tempKey, Uint8Array.of(1));
  const out2 = hmac(sha256, tempKey, concat(out1, Uint8Array.of(2)));
  return [out1, out2];
}

/** The ChaChaPoly nonce: 32 zero bits, then the counter little-endian. */
function nonceBytes(n: bigint): Uint8Array {
  const out = new Uint8Array(12);
  new DataView(out.buffer).setBigUint64(4, n, true);
  return out;
}

/** A CipherState (section 5.1 of the Noise specification). */
class CipherState {
  #key: Uint8Array | null = null;
  #nonce = 0n;

  initializeKey(key: Uint8Array): void {
    this.#key = key;
    this.#nonce = 0n;
  }

  get hasKey(): boolean {
    return this.#key !== null;
  }

  encrypt(ad: Uint8Array, plaintext: Uint8Array): Uint8Array {
    if (this.#key === null) {
      return plaintext;
    }
    const out = chacha20poly1305(this.#key, nonceBytes(this.#nonce), ad).encrypt(plaintext);
    this.#nonce += 1n;
    return out;
  }

  decrypt(ad: Uint8Array, ciphertext: Uint8Array): Uint8Array {
    if (this.#key === null) {
      return ciphertext;
    }
    const out = open(this.#key, this.#nonce, ad, ciphertext);
    this.#nonce += 1n;
    return out;
  }
}

/**
 * Decrypts `ciphertext`; into `output` (its length less the tag) when given,
 * which may be the ciphertext's own bytes: the tag is checked before
 * anything is written.
 */
function open(key: Uint8Array, nonce: bigint, ad: Uint8Array, ciphertext: Uint8Array, output?: Uint8Array): Uint8Array {
  try {
    return chacha20poly1305(key, nonceBytes(nonce), ad).decrypt(ciphertext, output);
  } catch {
    throw new NoiseError("decrypt");
  }
}

/** The SymmetricState (section 5.2) with the pre-message `<- s` of NK. */
class SymmetricState {
  #ck: Uint8Array;
  #h: Uint8Array;
  readonly cipher = new CipherState();

  constructor(prologueBytes: Uint8Array, responderStatic: Uint8Array) {
    // The protocol name is exactly 32 bytes (HASHLEN): h is the name itself.
    this.#h = new TextEncoder().encode(PROTOCOL_NAME);
    this.#ck = this.#h;
    this.mixHash(prologueBytes);
    this.mixHash(responderStatic);
  }

  get handshakeHash(): Uint8Array {
    return this.#h;
  }

  mixHash(data: Uint8Array): void {
    this.#h = sha256(concat(this.#h, data));
  }

  mixKey(ikm: Uint8Array): void {
    const [ck, tempKey] = hkdf2(this.#ck, ikm);
    this.#ck = ck;
    this.cipher.initializeKey(tempKey);
  }

  encryptAndHash(plaintext: Uint8Array): Uint8Array {
    const ciphertext = this.cipher.encrypt(this.#h, plaintext);
    this.mixHash(ciphertext);
    return ciphertext;
  }

  decryptAndHash(ciphertext: Uint8Array): Uint8Array {
    const plaintext = this.cipher.decrypt(this.#h, ciphertext);
    this.mixHash(ciphertext);
    return plaintext;
  }

  /** Split: the initiator-to-responder key first. */
  split(): [Uint8Array, Uint8Array] {
    return hkdf2(this.#ck, new Uint8Array(0));
  }
}

function checkReceived(len: number, min: number): void {
  if (len > MAX_MESSAGE_LEN) {
    throw new NoiseError("message_too_long");
  }
  if (len < min) {
    throw new NoiseError("message_too_short");
  }
}

function checkPayload(len: number, max: number): void {
  if (len > max) {
    throw new NoiseError("payload_too_long");
  }
}

type Step = "message1" | "message2";
type State = { kind: "running"; next: Step } | { kind: "finished" } | { kind: "poisoned" };

/**
 * What both roles share: the next step and the poison rule. A step begins by
 * poisoning and only a successful step moves on, so every error poisons.
 */
class Handshake {
  #state: State = { kind: "running", next: "message1" };

  begin(step: Step): void {
    const state = this.#state;
    this.#state = { kind: "poisoned" };
    if (state.kind === "poisoned") {
      throw new NoiseError("poisoned");
    }
    if (state.kind === "finished" || state.next !== step) {
      throw new NoiseError("out_of_order");
    }
  }

  advance(next: Step | null): void {
    this.#state = next === null ? { kind: "finished" } : { kind: "running", next };
  }

  get poisoned(): boolean {
    return this.#state.kind === "poisoned";
  }
}

/** The device's (the tab's) side of the handshake. */
export class Initiator {
  readonly #symmetric: SymmetricState;
  readonly #responderStatic: Uint8Array;
  readonly #ephemeral: Uint8Array;
  readonly #ephemeralPublic: Uint8Array;
  readonly #handshake = new Handshake();

  /**
   * Starts the handshake for `sessionId` on `hostId` against the host's
   * static public key; `ephemeralPrivate` is the key drawn before the open
   * request (SHA-256 of its public key went into the request).
   */
  static create(
    sessionId: string,
    hostId: string,
    hostStaticPublic: Uint8Array,
    ephemeralPrivate: Uint8Array = randomPrivateKey(),
  ): Initiator {
    return new Initiator(prologue(sessionId, hostId), hostStaticPublic, ephemeralPrivate);
  }

  /** Raw prologue and ephemeral key: for create() and the test vectors. */
  constructor(prologueBytes: Uint8Array, hostStaticPublic: Uint8Array, ephemeralPrivate: Uint8Array) {
    checkKey(hostStaticPublic);
    checkKey(ephemeralPrivate);
    this.#responderStatic = hostStaticPublic.slice();
    this.#ephemeral = ephemeralPrivate.slice();
    this.#ephemeralPublic = publicKey(this.#ephemeral);
    this.#symmetric = new SymmetricState(prologueBytes, this.#responderStatic);
  }

  /** The ephemeral public key `e` that message 1 carries. */
  get ephemeralPublic(): Uint8Array {
    return this.#ephemeralPublic.slice();
  }

  /** Message 1 (`-> e, es`) with the terminal session token as payload. */
  writeMessage1(token: Uint8Array): Uint8Array {
    this.#handshake.begin("message1");
    checkPayload(token.length, MAX_MESSAGE1_PAYLOAD_LEN);
    this.#symmetric.mixHash(this.#ephemeralPublic);
    this.#symmetric.mixKey(dh(this.#ephemeral, this.#responderStatic));
    const ciphertext = this.#symmetric.encryptAndHash(token);
    this.#handshake.advance("message2");
    return concat(this.#ephemeralPublic, ciphertext);
  }

  /** Reads message 2 (`<- e, ee`): the host's payload and the transport. */
  readMessage2(message: Uint8Array): { payload: Uint8Array; transport: Transport } {
    this.#handshake.begin("message2");
    checkReceived(message.length, HANDSHAKE_OVERHEAD);
    const remoteEphemeral = message.subarray(0, KEY_LEN);
    this.#symmetric.mixHash(remoteEphemeral);
    this.#symmetric.mixKey(dh(this.#ephemeral, remoteEphemeral));
    const payload = this.#symmetric.decryptAndHash(message.subarray(KEY_LEN));
    const [send, receive] = this.#symmetric.split();
    const transport = new Transport(send, receive, this.#symmetric.handshakeHash);
    this.#handshake.advance(null);
    return { payload, transport };
  }
}

/** What message 1 brought the host. */
export interface Message1 {
  payload: Uint8Array;
  initiatorEphemeral: Uint8Array;
}

/** The host's side of the handshake (the tests' peer; the host is Rust). */
export class Responder {
  readonly #symmetric: SymmetricState;
  readonly #static: Uint8Array;
  readonly #ephemeral: Uint8Array;
  readonly #handshake = new Handshake();
  #remoteEphemeral: Uint8Array | null = null;

  static create(
    sessionId: string,
    hostId: string,
    staticPrivate: Uint8Array,
    ephemeralPrivate: Uint8Array = randomPrivateKey(),
  ): Responder {
    return new Responder(prologue(sessionId, hostId), staticPrivate, ephemeralPrivate);
  }

  constructor(prologueBytes: Uint8Array, staticPrivate: Uint8Array, ephemeralPrivate: Uint8Array) {
    checkKey(staticPrivate);
    checkKey(ephemeralPrivate);
    this.#static = staticPrivate.slice();
    this.#ephemeral = ephemeralPrivate.slice();
    this.#symmetric = new SymmetricState(prologueBytes, publicKey(this.#static));
  }

  readMessage1(message: Uint8Array): Message1 {
    this.#handshake.begin("message1");
    checkReceived(message.length, HANDSHAKE_OVERHEAD);
    const remoteEphemeral = message.slice(0, KEY_LEN);
    this.#symmetric.mixHash(remoteEphemeral);
    this.#symmetric.mixKey(dh(this.#static, remoteEphemeral));
    const payload = this.#symmetric.decryptAndHash(message.subarray(KEY_LEN));
    this.#remoteEphemeral = remoteEphemeral;
    this.#handshake.advance("message2");
    return { payload, initiatorEphemeral: remoteEphemeral.slice() };
  }

  writeMessage2(hostJson: Uint8Array): { message: Uint8Array; transport: Transport } {
    this.#handshake.begin("message2");
    checkPayload(hostJson.length, MAX_MESSAGE2_PAYLOAD_LEN);
    const remoteEphemeral = this.#remoteEphemeral;
    if (remoteEphemeral === null) {
      throw new NoiseError("out_of_order");
    }
    const ephemeralPublic = publicKey(this.#ephemeral);
    this.#symmetric.mixHash(ephemeralPublic);
    this.#symmetric.mixKey(dh(this.#ephemeral, remoteEphemeral));
    const ciphertext = this.#symmetric.encryptAndHash(hostJson);
    const [receive, send] = this.#symmetric.split();
    const transport = new Transport(send, receive, this.#symmetric.handshakeHash);
    this.#handshake.advance(null);
    return { message: concat(ephemeralPublic, ciphertext), transport };
  }
}

/**
 * One side's transport: a counter per direction. A failed read poisons both
 * directions; a refused write (too long, nonces used up) changes nothing.
 */
export class Transport {
  readonly #sendKey: Uint8Array;
  readonly #receiveKey: Uint8Array;
  readonly #handshakeHash: Uint8Array;
  #sendNonce = 0n;
  #receiveNonce = 0n;
  #poisoned = false;

  constructor(sendKey: Uint8Array, receiveKey: Uint8Array, handshakeHash: Uint8Array) {
    this.#sendKey = sendKey;
    this.#receiveKey = receiveKey;
    this.#handshakeHash = handshakeHash.slice();
  }

  get handshakeHash(): Uint8Array {
    return this.#handshakeHash.slice();
  }

  get poisoned(): boolean {
    return this.#poisoned;
  }

  writeMessage(plaintext: Uint8Array): Uint8Array {
    if (this.#poisoned) {
      throw new NoiseError("poisoned");
    }
    checkPayload(plaintext.length, MAX_TRANSPORT_PLAINTEXT_LEN);
    const nonce = usable(this.#sendNonce);
    const out = chacha20poly1305(this.#sendKey, nonceBytes(nonce), new Uint8Array(0)).encrypt(plaintext);
    this.#sendNonce = nonce + 1n;
    return out;
  }

  readMessage(message: Uint8Array): Uint8Array {
    return this.#read(message, false);
  }

  /**
   * As readMessage, decrypting into the message's own bytes: the plaintext
   * is a view of `message`, which no longer holds the ciphertext. For a
   * message the caller owns (a received buffer), a burst costs no copy. A
   * message that is refused is left as it was.
   */
  readMessageInPlace(message: Uint8Array): Uint8Array {
    return this.#read(message, true);
  }

  #read(message: Uint8Array, inPlace: boolean): Uint8Array {
    if (this.#poisoned) {
      throw new NoiseError("poisoned");
    }
    const nonce = usable(this.#receiveNonce);
    try {
      checkReceived(message.length, TAG_LEN);
      const output = inPlace ? message.subarray(0, message.length - TAG_LEN) : undefined;
      const plaintext = open(this.#receiveKey, nonce, new Uint8Array(0), message, output);
      this.#receiveNonce = nonce + 1n;
      return plaintext;
    } catch (error) {
      this.#poisoned = true;
      throw error;
    }
  }

  /** Test seam: moves both counters, to reach the end of the nonce space. */
  setNoncesForTest(send: bigint, receive: bigint): void {
    this.#sendNonce = send;
    this.#receiveNonce = receive;
  }
}

function usable(n: bigint): bigint {
  if (n >= NONCE_MAX) {
    throw new NoiseError("nonce_exhausted");
  }
  return n;
}

/** SHA-256 of the ephemeral public key: client_ephemeral_key_hash (claim cek). */
export function ephemeralKeyHash(ephemeralPublic: Uint8Array): Uint8Array {
  return sha256(ephemeralPublic);
}
