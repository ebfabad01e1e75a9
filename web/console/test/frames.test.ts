// Frames of 5.4 as the console writes and reads them.
import { test } from "node:test";
import assert from "node:assert/strict";

import { decodeHostFrame, encodeClose, encodeData, encodeResize, encodeStart, FrameError, MAX_DATA_LEN, MAX_FRAME_LEN } from "../src/frames.js";
import { toHex } from "../src/bytes.js";
import { comparePin } from "../src/pins.js";

test("the device's frames: start, resize, data, close", () => {
  assert.equal(toHex(encodeStart(80, 24)), "0100500018");
  assert.equal(toHex(encodeResize(65535, 1)), "03ffff0001");
  assert.equal(toHex(encodeClose()), "04");
  assert.equal(toHex(encodeData(Uint8Array.of(0x61))), "0261");
  assert.equal(encodeData(new Uint8Array(MAX_DATA_LEN)).length, MAX_FRAME_LEN);
  for (const [c, r] of [[0, 24], [80, 0], [65536, 1], [1.5, 2]] as const) {
    assert.throws(() => encodeStart(c, r), FrameError);
  }
  assert.throws(() => encodeData(new Uint8Array(0)), FrameError);
  assert.throws(() => encodeData(new Uint8Array(MAX_DATA_LEN + 1)), FrameError);
});

test("the host's frames are read, the rest refused", () => {
  assert.deepEqual(decodeHostFrame(Uint8Array.of(0x02, 0x68, 0x69)), { type: "data", bytes: Uint8Array.of(0x68, 0x69) });
  assert.deepEqual(decodeHostFrame(Uint8Array.of(0x05, 0xff, 0xff, 0xff, 0xf9)), { type: "exit", code: -7 });
  assert.deepEqual(decodeHostFrame(Uint8Array.of(0x05, 0, 0, 0, 7)), { type: "exit", code: 7 });
  assert.deepEqual(decodeHostFrame(Uint8Array.of(0x06)), { type: "replay_begin" });
  assert.deepEqual(decodeHostFrame(Uint8Array.of(0x07)), { type: "replay_end" });
  const refused = [
    new Uint8Array(0),
    Uint8Array.of(0x02),
    Uint8Array.of(0x05, 0, 0, 7),
    Uint8Array.of(0x06, 0),
    Uint8Array.of(0x01, 0, 80, 0, 24),
    Uint8Array.of(0x03, 0, 80, 0, 24),
    Uint8Array.of(0x04),
    Uint8Array.of(0x08),
    Uint8Array.of(0x00),
    new Uint8Array(MAX_FRAME_LEN + 1).fill(2),
  ];
  for (const frame of refused) {
    assert.throws(() => decodeHostFrame(frame), FrameError, toHex(frame.subarray(0, 8)));
  }
});

test("pins: new, same, changed key or generation", () => {
  const pin = { host_id: "h", noise_public_key: "AAAA", key_generation: 1, key_fingerprint: "abcd" };
  assert.deepEqual(comparePin(undefined, pin), { kind: "new" });
  assert.deepEqual(comparePin(pin, { ...pin }), { kind: "same" });
  assert.equal(comparePin(pin, { ...pin, noise_public_key: "BBBB" }).kind, "changed");
  assert.equal(comparePin(pin, { ...pin, key_generation: 2 }).kind, "changed");
});
