// One terminal session in the tab, as the page sees it (spec 24, 6.1 steps
// 5-7, 5.2, 5.4). The stream (its WebSocket, Noise NK, the frames, the
// output filter of 11.2) runs in a stream worker of its own
// (stream_worker.ts, docs/decisions.md D-700, D-716), so that a burst of
// output is received, decrypted and filtered beside the page's thread, which
// only renders. This class is the view's handle on the session.
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

/** How long a stopped worker has to close its socket before it is ended. */
const STOP_GRACE_MS = 1000;

/** A connected, started session. */
export class TerminalConnection {
  readonly #worker: Worker;
  #ended = false;

  private constructor(worker: Worker) {
    this.#worker = worker;
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
    const connection = new TerminalConnection(worker);
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
      worker.postMessage({ op: "connect", grant, hostId, columns, rows } satisfies ToWorker);
    });
  }

  /**
   * Ends the worker: it closes its socket (if still open) first, so the
   * server sees the device leave (a detach), then ends itself.
   */
  #stop(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#worker.onmessage = null;
    this.#worker.postMessage({ op: "detach" } satisfies ToWorker);
    // A worker that cannot answer (it failed) ends all the same.
    const worker = this.#worker;
    setTimeout(() => worker.terminate(), STOP_GRACE_MS);
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
