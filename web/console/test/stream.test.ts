// The stream of a console session as the stream worker runs it (stream.ts,
// D-700), over a socket played by this test: the server's `ready`, the host's
// side of Noise NK (the TypeScript responder), its frames, and the closes of
// 13. The browser test runs the same code against the real server and host;
// this one reaches the refusals that a real peer never sends.
import { test } from "node:test";
import assert from "node:assert/strict";

import { StreamConnection } from "../src/stream.js";
import { HandshakeEnd, SOCKET_CLOSED, SOCKET_OPEN, type Grant, type SessionEvents, type StreamSocket } from "../src/stream_protocol.js";
import { publicKey, randomPrivateKey, Responder, type Transport } from "../src/noise/index.js";
import { toBase64Url } from "../src/bytes.js";

const SESSION = "01234567-89ab-cdef-0123-456789abcdef";
const HOST = "fedcba98-7654-3210-fedc-ba9876543210";
const TOKEN = "the-session-token";

/** What the test's socket saw from the stream, and what it can do back. */
class PlayedSocket implements StreamSocket {
  readyState = 0;
  onopen: (() => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number; reason: string }) => void) | null = null;
  onerror: (() => void) | null = null;
  readonly sent: Array<string | Uint8Array> = [];
  closedWith: number | null = null;

  send(data: string | Uint8Array): void {
    this.sent.push(typeof data === "string" ? data : data.slice());
  }

  close(code: number): void {
    this.closedWith = code;
  }

  open(): void {
    this.readyState = SOCKET_OPEN;
    this.onopen?.();
  }

  receive(data: string | Uint8Array): void {
    this.onmessage?.({ data: typeof data === "string" ? data : data.slice().buffer });
  }

  end(code: number, reason: string): void {
    this.readyState = SOCKET_CLOSED;
    this.onclose?.({ code, reason });
  }
}

interface Seen {
  output: string;
  statuses: string[];
  replay: boolean[];
  exit: number | null;
  end: { code: number; reason: string; exitCode: number | null } | null;
}

function recorder(): { events: SessionEvents; seen: Seen } {
  const seen: Seen = { output: "", statuses: [], replay: [], exit: null, end: null };
  const decoder = new TextDecoder();
  const events: SessionEvents = {
    status: (text) => seen.statuses.push(text),
    output: (bytes) => (seen.output += decoder.decode(bytes, { stream: true })),
    replay: (begin) => seen.replay.push(begin),
    exit: (code) => (seen.exit = code),
    end: (end, exitCode) => (seen.end = { ...end, exitCode }),
  };
  return { events, seen };
}

function grant(hostPrivate: Uint8Array): Grant {
  return {
    session_id: SESSION,
    token: TOKEN,
    noise_public_key: toBase64Url(publicKey(hostPrivate)),
    key_generation: 1,
    key_fingerprint: "unused here",
    stream_path: `/api/v1/terminal/sessions/${SESSION}/stream`,
  };
}

const ready = JSON.stringify({ op: "ready", d: { session_id: SESSION } });

/** Plays the server and the host up to the host's message 2. */
async function connected(): Promise<{ socket: PlayedSocket; connection: StreamConnection; host: Transport; seen: Seen }> {
  const hostPrivate = randomPrivateKey();
  const socket = new PlayedSocket();
  const { events, seen } = recorder();
  const pending = StreamConnection.connect(socket, grant(hostPrivate), HOST, randomPrivateKey(), 100, 30, events);
  socket.open();
  assert.deepEqual(JSON.parse(socket.sent[0] as string), { op: "identify", d: {} });
  socket.receive(ready);
  const responder = Responder.create(SESSION, HOST, hostPrivate);
  const message1 = responder.readMessage1(socket.sent[1] as Uint8Array);
  assert.equal(new TextDecoder().decode(message1.payload), TOKEN);
  const { message, transport } = responder.writeMessage2(new TextEncoder().encode("{}"));
  socket.receive(message);
  const connection = await pending;
  return { socket, connection, host: transport, seen };
}

test("the stream runs the handshake, sends start, and hands on filtered output, the exit and the end", async () => {
  const { socket, connection, host, seen } = await connected();
  // start with the size, then typed input as data.
  assert.deepEqual(Array.from(host.readMessage(socket.sent[2] as Uint8Array)), [0x01, 0, 100, 0, 30]);
  connection.send(new TextEncoder().encode("ls\r"));
  assert.deepEqual(Array.from(host.readMessage(socket.sent[3] as Uint8Array)), [0x02, 0x6c, 0x73, 0x0d]);
  connection.resize(120, 40);
  assert.deepEqual(Array.from(host.readMessage(socket.sent[4] as Uint8Array)), [0x03, 0, 120, 0, 40]);

  const data = (text: string) => Uint8Array.of(0x02, ...new TextEncoder().encode(text));
  socket.receive(host.writeMessage(Uint8Array.of(0x06)));
  // OSC 52 (the clipboard) never reaches the terminal (11.2).
  socket.receive(host.writeMessage(data("before\x1b]52;c;Y2FuYXJ5\x07after")));
  socket.receive(host.writeMessage(Uint8Array.of(0x07)));
  socket.receive(host.writeMessage(Uint8Array.of(0x05, 0, 0, 0, 7)));
  socket.end(4100, "process_exited");
  assert.equal(seen.output, "beforeafter");
  assert.deepEqual(seen.replay, [true, false]);
  assert.equal(seen.exit, 7);
  assert.deepEqual(seen.end, { code: 4100, reason: "process_exited", exitCode: 7 });
  // Nothing more goes out after the end.
  const count = socket.sent.length;
  connection.send(new TextEncoder().encode("x"));
  assert.equal(socket.sent.length, count);
});

test("a message that does not decrypt, or a frame the host may not send, ends the stream as 4104", async () => {
  for (const tamper of ["flip", "frame"] as const) {
    const { socket, host, seen } = await connected();
    const message = host.writeMessage(tamper === "frame" ? Uint8Array.of(0x01, 0, 80, 0, 24) : Uint8Array.of(0x02, 0x41));
    if (tamper === "flip") message[0] = (message[0] ?? 0) ^ 1;
    socket.receive(message);
    assert.equal(socket.closedWith, 1000, tamper);
    assert.deepEqual(seen.end, { code: 4104, reason: "handshake_failed", exitCode: null }, tamper);
    // What arrives after is not read.
    socket.receive(host.writeMessage(Uint8Array.of(0x02, 0x42)));
    assert.equal(seen.output, "", tamper);
  }
});

test("the handshake refuses a wrong ready, a message 2 that does not decrypt and a text message 2; a close on the way is its end", async () => {
  const cases: Array<[string, (socket: PlayedSocket) => void, { code: number; reason: string }]> = [
    ["ready of another session", (s) => s.receive(JSON.stringify({ op: "ready", d: { session_id: HOST } })), { code: 4104, reason: "handshake_failed" }],
    ["binary instead of ready", (s) => s.receive(Uint8Array.of(1)), { code: 4104, reason: "handshake_failed" }],
    [
      "a message 2 that does not decrypt",
      (s) => {
        s.receive(ready);
        s.receive(new Uint8Array(80).fill(7));
      },
      { code: 4104, reason: "handshake_failed" },
    ],
    [
      "text instead of message 2",
      (s) => {
        s.receive(ready);
        s.receive("{}");
      },
      { code: 4104, reason: "handshake_failed" },
    ],
    ["the server closes with 4101", (s) => s.end(4101, "token_invalid"), { code: 4101, reason: "token_invalid" }],
    [
      "the connection breaks after ready",
      (s) => {
        s.receive(ready);
        s.end(1006, "");
      },
      { code: 1006, reason: "" },
    ],
  ];
  for (const [name, play, expected] of cases) {
    const hostPrivate = randomPrivateKey();
    const socket = new PlayedSocket();
    const { events, seen } = recorder();
    const pending = StreamConnection.connect(socket, grant(hostPrivate), HOST, randomPrivateKey(), 80, 24, events);
    socket.open();
    play(socket);
    await assert.rejects(pending, (error: unknown) => {
      assert.ok(error instanceof HandshakeEnd, name);
      assert.deepEqual(error.end, expected, name);
      return true;
    });
    assert.equal(seen.end, null, name);
    assert.equal(seen.output, "", name);
  }
});
