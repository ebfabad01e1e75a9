// One terminal session's device stream (spec 24, 6.1 steps 5-7, 5.2, 5.4),
// run inside the stream worker (stream_worker.ts, docs/decisions.md D-700)
// over the worker's WebSocket (a StreamSocket, D-716): the device stream on the same
// origin (the cookie authenticates the upgrade, identify carries no token),
// Noise NK as initiator with the host key of the grant, `start` with the
// size, then data, resize, exit and the close. The output passes the filter
// of 11.2 here, before it leaves the worker. The console's twin of
// crates/cli/src/terminal.rs.
import { Initiator, MAX_MESSAGE_LEN, type Transport } from "./noise/index.js";
import { fromBase64 } from "./bytes.js";
import { decodeHostFrame, encodeClose, encodeData, encodeResize, encodeStart, MAX_DATA_LEN } from "./frames.js";
import { OutputFilter } from "./filter/index.js";
import type { StreamEnd } from "./close.js";
import { HandshakeEnd, SOCKET_OPEN, type Grant, type SessionEvents, type StreamSocket } from "./stream_protocol.js";

const HANDSHAKE_WAIT_MS = 30_000;

/** A connected, started device stream. */
export class StreamConnection {
  readonly #socket: StreamSocket;
  readonly #transport: Transport;
  readonly #events: SessionEvents;
  readonly #filter = new OutputFilter();
  #exitCode: number | null = null;
  #ended = false;

  private constructor(socket: StreamSocket, transport: Transport, events: SessionEvents) {
    this.#socket = socket;
    this.#transport = transport;
    this.#events = events;
  }

  /**
   * Runs the handshake of `grant` on `socket`, the device stream being
   * connected, and sends `start`. Rejects with {@link HandshakeEnd} when the
   * stream closes first.
   */
  static connect(socket: StreamSocket, grant: Grant, hostId: string, ephemeralPrivate: Uint8Array, columns: number, rows: number, events: SessionEvents): Promise<StreamConnection> {
    const hostKey = fromBase64(grant.noise_public_key);
    const initiator = Initiator.create(grant.session_id, hostId, hostKey, ephemeralPrivate);
    events.status("Connecting to the server…");
    return new Promise((resolve, reject) => {
      let phase: "identify" | "ready" | "message2" | "running" = "identify";
      let connection: StreamConnection | null = null;
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
      socket.onmessage = (event: { data: unknown }) => {
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
          connection = new StreamConnection(socket, transport, events);
          connection.#sendFrame(encodeStart(columns, rows));
          resolve(connection);
        }
      };
      socket.onclose = (event: { code: number; reason: string }) => {
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
    if (this.#ended || this.#socket.readyState !== SOCKET_OPEN) {
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

  #receive(data: unknown): void {
    if (this.#ended) return;
    if (!(data instanceof ArrayBuffer)) {
      this.#protocolFailure();
      return;
    }
    let frame;
    try {
      // The received buffer is the stream's alone: decrypted where it lies.
      frame = decodeHostFrame(this.#transport.readMessageInPlace(new Uint8Array(data)));
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

function isReady(text: string, sessionId: string): boolean {
  try {
    const message = JSON.parse(text) as { op?: unknown; d?: { session_id?: unknown } };
    return message.op === "ready" && message.d?.session_id === sessionId;
  } catch {
    return false;
  }
}
