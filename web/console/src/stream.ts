// One terminal session in the tab (spec 24, 6.1 steps 5-7, 5.2, 5.4): the
// device stream on the same origin (the cookie authenticates the upgrade,
// identify carries no token), Noise NK as initiator with the host key of
// the grant, `start` with the size, then data, resize, exit and the close.
// The console's twin of crates/cli/src/terminal.rs.
import { Initiator, MAX_MESSAGE_LEN, type Transport } from "./noise/index.js";
import { fromBase64 } from "./bytes.js";
import { decodeHostFrame, encodeClose, encodeData, encodeResize, encodeStart, MAX_DATA_LEN } from "./frames.js";
import { OutputFilter } from "./filter/index.js";
import type { StreamEnd } from "./close.js";

/** What open and attach answer. */
export interface Grant {
  session_id: string;
  token: string;
  noise_public_key: string;
  key_generation: number;
  key_fingerprint: string;
  stream_path: string;
}

export function readGrant(value: unknown): Grant {
  if (typeof value !== "object" || value === null) throw new Error("The grant was not an object.");
  const v = value as Record<string, unknown>;
  for (const key of ["session_id", "token", "noise_public_key", "key_fingerprint", "stream_path"]) {
    if (typeof v[key] !== "string") throw new Error(`The grant lacks ${key}.`);
  }
  if (typeof v.key_generation !== "number") throw new Error("The grant lacks key_generation.");
  if (!/^\/api\/v1\/terminal\/sessions\/[0-9a-f-]{36}\/stream$/.test(v.stream_path as string)) {
    throw new Error("The grant's stream path is not a device stream.");
  }
  return v as unknown as Grant;
}

export interface SessionEvents {
  /** A wait of the handshake ("Connecting…", "Host handshake…"). */
  status(text: string): void;
  /** Filtered output for the terminal. */
  output(bytes: Uint8Array): void;
  replay(begin: boolean): void;
  exit(code: number): void;
  /** The end of the stream: its close code and text (1006 for a lost connection). */
  end(end: StreamEnd, exitCode: number | null): void;
}

const HANDSHAKE_WAIT_MS = 30_000;

/** A connected, started session. */
export class TerminalConnection {
  readonly #socket: WebSocket;
  readonly #transport: Transport;
  readonly #events: SessionEvents;
  readonly #filter = new OutputFilter();
  #exitCode: number | null = null;
  #ended = false;

  private constructor(socket: WebSocket, transport: Transport, events: SessionEvents) {
    this.#socket = socket;
    this.#transport = transport;
    this.#events = events;
  }

  /** Connects the device stream of `grant`, runs the handshake, sends `start`. */
  static connect(grant: Grant, hostId: string, ephemeralPrivate: Uint8Array, columns: number, rows: number, events: SessionEvents): Promise<TerminalConnection> {
    const url = new URL(grant.stream_path, window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const hostKey = fromBase64(grant.noise_public_key);
    const initiator = Initiator.create(grant.session_id, hostId, hostKey, ephemeralPrivate);
    events.status("Connecting to the server…");
    const socket = new WebSocket(url.href);
    socket.binaryType = "arraybuffer";
    return new Promise((resolve, reject) => {
      let phase: "identify" | "ready" | "message2" | "running" = "identify";
      let connection: TerminalConnection | null = null;
      const timer = setTimeout(() => fail({ code: 1006, reason: "" }), HANDSHAKE_WAIT_MS);
      const fail = (end: StreamEnd) => {
        clearTimeout(timer);
        if (phase !== "running") {
          phase = "running";
          try {
            socket.close(1000);
          } catch {
            // already closed
          }
          reject(new HandshakeEnd(end));
        }
      };
      socket.onopen = () => {
        socket.send(JSON.stringify({ op: "identify", d: {} }));
        phase = "ready";
        events.status("Waiting for the server…");
      };
      socket.onmessage = (event: MessageEvent) => {
        if (connection !== null) {
          connection.#receive(event.data);
          return;
        }
        if (phase === "ready") {
          if (typeof event.data !== "string" || !isReady(event.data, grant.session_id)) {
            fail({ code: 4104, reason: "handshake_failed" });
            return;
          }
          events.status("Host handshake…");
          socket.send(initiator.writeMessage1(new TextEncoder().encode(grant.token)));
          phase = "message2";
          return;
        }
        if (phase === "message2") {
          if (!(event.data instanceof ArrayBuffer) || event.data.byteLength > MAX_MESSAGE_LEN) {
            fail({ code: 4104, reason: "handshake_failed" });
            return;
          }
          let transport: Transport;
          try {
            transport = initiator.readMessage2(new Uint8Array(event.data)).transport;
          } catch {
            // Message 2 that does not decrypt: not the host the key belongs to.
            fail({ code: 4104, reason: "handshake_failed" });
            return;
          }
          clearTimeout(timer);
          phase = "running";
          connection = new TerminalConnection(socket, transport, events);
          connection.#sendFrame(encodeStart(columns, rows));
          resolve(connection);
        }
      };
      socket.onclose = (event: CloseEvent) => {
        if (connection !== null) {
          connection.#closed({ code: event.code, reason: event.reason });
        } else {
          fail({ code: event.code, reason: event.reason });
        }
      };
      socket.onerror = () => {
        // onclose follows with 1006.
      };
    });
  }

  #sendFrame(plain: Uint8Array): void {
    if (this.#ended || this.#socket.readyState !== WebSocket.OPEN) {
      return;
    }
    this.#socket.send(this.#transport.writeMessage(plain));
  }

  /** Typed input (already UTF-8 bytes), in data frames. */
  send(bytes: Uint8Array): void {
    for (let at = 0; at < bytes.length; at += MAX_DATA_LEN) {
      this.#sendFrame(encodeData(bytes.subarray(at, at + MAX_DATA_LEN)));
    }
  }

  resize(columns: number, rows: number): void {
    this.#sendFrame(encodeResize(columns, rows));
  }

  /** Ends the session (the frame `close`); the server answers with 4100. */
  closeSession(): void {
    this.#sendFrame(encodeClose());
  }

  /** Leaves the session detached on the server (a close without the frame). */
  detach(): void {
    this.#ended = true;
    this.#socket.close(1000);
  }

  #receive(data: unknown): void {
    if (this.#ended) return;
    if (!(data instanceof ArrayBuffer)) {
      this.#protocolFailure();
      return;
    }
    let frame;
    try {
      frame = decodeHostFrame(this.#transport.readMessage(new Uint8Array(data)));
    } catch {
      // A message that does not decrypt (NoiseError) or a frame the host may
      // not send (FrameError): both end the session as 4104 (5.4).
      this.#protocolFailure();
      return;
    }
    switch (frame.type) {
      case "data":
        this.#events.output(this.#filter.filter(frame.bytes));
        break;
      case "exit":
        this.#exitCode = frame.code;
        this.#events.exit(frame.code);
        break;
      case "replay_begin":
        this.#events.replay(true);
        break;
      case "replay_end":
        this.#events.replay(false);
        break;
    }
  }

  /** A frame that does not decrypt or decode: 4104, no retry. */
  #protocolFailure(): void {
    this.#ended = true;
    try {
      this.#socket.close(1000);
    } catch {
      // closed
    }
    this.#finish({ code: 4104, reason: "handshake_failed" });
  }

  #closed(end: StreamEnd): void {
    if (this.#ended) {
      return;
    }
    this.#ended = true;
    this.#finish(end);
  }

  #finish(end: StreamEnd): void {
    const rest = this.#filter.finish();
    if (rest.length > 0) this.#events.output(rest);
    this.#events.end(end, this.#exitCode);
  }
}

/** The handshake ended before the session ran. */
export class HandshakeEnd extends Error {
  readonly end: StreamEnd;
  constructor(end: StreamEnd) {
    super(`the stream closed during the handshake (${end.code})`);
    this.name = "HandshakeEnd";
    this.end = end;
  }
}

function isReady(text: string, sessionId: string): boolean {
  try {
    const message = JSON.parse(text) as { op?: unknown; d?: { session_id?: unknown } };
    return message.op === "ready" && message.d?.session_id === sessionId;
  } catch {
    return false;
  }
}
