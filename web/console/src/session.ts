// One terminal session in the tab, as the page sees it (spec 24, 6.1 steps
// 5-7, 5.2, 5.4). The page holds the device stream's WebSocket; the stream
// itself (Noise NK, the frames, the output filter of 11.2) runs in a stream
// worker of its own (stream_worker.ts, docs/decisions.md D-700), so that a
// burst of output is decrypted and filtered beside the page's thread, which
// only moves messages and renders. This class joins the two and is the
// view's handle on the session.
import type { FromWorker, Grant, SessionEvents, ToWorker } from "./stream_protocol.js";
import { HandshakeEnd } from "./stream_protocol.js";

export { HandshakeEnd, readGrant, type Grant, type SessionEvents } from "./stream_protocol.js";

/** The worker's script, served with the console (crates/server/src/http/console.rs). */
export const STREAM_WORKER_PATH = "/assets/stream-worker.js";

/**
 * A stream worker started ahead of its session (docs/decisions.md D-709): it
 * loads, compiles and draws the session's ephemeral key while the person
 * answers the passkey step-up, instead of after the grant. A step-up that
 * fails or is cancelled ends it.
 */
export class StreamWorker {
  readonly worker = new Worker(STREAM_WORKER_PATH, { name: "bothy-stream" });
  readonly #keyHash: Promise<Uint8Array>;
  #failure: Error | null = null;
  #onFailure: ((error: Error) => void) | null = null;

  constructor() {
    this.#keyHash = new Promise((resolve, reject) => {
      // The worker's first message; `connect` takes the worker's messages over.
      this.worker.onmessage = (event: MessageEvent<FromWorker>) => {
        if (event.data.op === "ephemeral") resolve(event.data.keyHash);
        else reject(new Error("The console's stream worker did not start as expected. Reload the page and try again."));
      };
      this.#onFailure = reject;
    });
    // Awaited only after a step-up: a failure before that is reported by
    // `onFailure` or not at all (the attempt ended), never as unhandled.
    this.#keyHash.catch(() => {});
    // The script did not load or threw: nothing runs in this tab. Kept from
    // the start, so that a failure before the session is granted is not lost.
    this.worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      this.#fail(new Error("The console's stream worker could not run. Reload the page and try again."));
    };
    this.worker.onmessageerror = () => this.#fail(new Error("The console's stream worker sent a message that could not be read."));
  }

  #fail(error: Error): void {
    this.#failure ??= error;
    this.#onFailure?.(error);
  }

  /**
   * SHA-256 of the public half of the ephemeral key the worker drew (5.2:
   * `client_ephemeral_key_hash`). Rejects when the worker cannot run.
   */
  ephemeralKeyHash(): Promise<Uint8Array> {
    return this.#keyHash;
  }

  /** Calls `handler` when the worker fails, at once if it already has. */
  onFailure(handler: (error: Error) => void): void {
    this.#onFailure = handler;
    if (this.#failure !== null) handler(this.#failure);
  }

  terminate(): void {
    this.worker.terminate();
  }
}

/** A connected, started session. */
export class TerminalConnection {
  readonly #worker: Worker;
  readonly #socket: WebSocket;
  #ended = false;

  private constructor(worker: Worker, socket: WebSocket) {
    this.#worker = worker;
    this.#socket = socket;
  }

  /**
   * Connects the device stream of `grant` (the cookie authenticates it) and
   * runs its handshake in `prepared` (the grant was asked with the hash of
   * its ephemeral key), which sends `start`. Rejects with
   * {@link HandshakeEnd} when the stream closes first, with an Error when the
   * worker cannot run.
   */
  static connect(prepared: StreamWorker, grant: Grant, hostId: string, columns: number, rows: number, events: SessionEvents): Promise<TerminalConnection> {
    const worker = prepared.worker;
    const toWorker = (message: ToWorker, transfer: Transferable[] = []) => worker.postMessage(message, transfer);
    toWorker({ op: "connect", grant, hostId, columns, rows });

    const url = new URL(grant.stream_path, window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(url.href);
    socket.binaryType = "arraybuffer";
    socket.onopen = () => toWorker({ op: "socket_open" });
    socket.onmessage = (event: MessageEvent<string | ArrayBuffer>) => {
      const data = event.data;
      toWorker({ op: "socket_message", data }, typeof data === "string" ? [] : [data]);
    };
    socket.onclose = (event: CloseEvent) => toWorker({ op: "socket_close", code: event.code, reason: event.reason });
    socket.onerror = () => {
      // onclose follows with 1006.
    };

    const connection = new TerminalConnection(worker, socket);
    return new Promise((resolve, reject) => {
      let running = false;
      const failed = (error: Error) => {
        if (running) {
          connection.#finish(events, { code: 1006, reason: "" }, null);
        } else {
          connection.#stop();
          reject(error);
        }
      };
      worker.onmessage = (event: MessageEvent<FromWorker>) => {
        const message = event.data;
        switch (message.op) {
          case "socket_send":
            if (socket.readyState === WebSocket.OPEN) socket.send(message.data);
            break;
          case "socket_close":
            socket.close(message.code);
            break;
          case "status":
            events.status(message.text);
            break;
          case "connected":
            running = true;
            resolve(connection);
            break;
          case "handshake_end":
            connection.#stop();
            reject(new HandshakeEnd(message.end));
            break;
          case "failed":
            failed(new Error(message.message));
            break;
          case "output":
            if (!connection.#ended) events.output(message.bytes, () => connection.#post({ op: "output_written" }));
            break;
          case "replay":
            if (!connection.#ended) events.replay(message.begin);
            break;
          case "exit":
            if (!connection.#ended) events.exit(message.code);
            break;
          case "end":
            connection.#finish(events, message.end, message.exitCode);
            break;
        }
      };
      prepared.onFailure(failed);
    });
  }

  /** Closes the socket (if still open) and ends the worker. */
  #stop(): void {
    this.#ended = true;
    this.#worker.terminate();
    this.#socket.onmessage = null;
    this.#socket.onclose = null;
    if (this.#socket.readyState === WebSocket.OPEN || this.#socket.readyState === WebSocket.CONNECTING) {
      this.#socket.close(1000);
    }
  }

  #finish(events: SessionEvents, end: { code: number; reason: string }, exitCode: number | null): void {
    if (this.#ended) return;
    this.#stop();
    events.end(end, exitCode);
  }

  #post(message: ToWorker, transfer: Transferable[] = []): void {
    if (!this.#ended) this.#worker.postMessage(message, transfer);
  }

  /** Typed input (already UTF-8 bytes), in data frames. */
  send(bytes: Uint8Array): void {
    const own = bytes.slice();
    this.#post({ op: "send", bytes: own }, [own.buffer as ArrayBuffer]);
  }

  resize(columns: number, rows: number): void {
    this.#post({ op: "resize", columns, rows });
  }

  /** Ends the session (the frame `close`); the server answers with 4100. */
  closeSession(): void {
    this.#post({ op: "close_session" });
  }

  /** Leaves the session detached on the server (a close without the frame). */
  detach(): void {
    this.#stop();
  }
}
