// The stream worker (assets/stream-worker.js, docs/decisions.md D-700): one
// per session in the tab. It holds the Noise transport, the frames and the
// output filter of 11.2, so that decrypting and filtering a burst of output
// runs beside the page's thread, which only renders. The device stream's
// WebSocket is the worker's own too (D-716): a burst of output never passes
// the page's thread before it is decrypted and filtered. What leaves the
// worker for the terminal is filtered output and the session's events, in
// order.
import { ephemeralKeyHash, publicKey, randomPrivateKey } from "./noise/index.js";
import { StreamConnection } from "./stream.js";
import { HandshakeEnd, type FromWorker, type SessionEvents, type StreamSocket, type ToWorker } from "./stream_protocol.js";

interface WorkerScope {
  readonly location: { readonly href: string };
  onmessage: ((event: MessageEvent<ToWorker>) => void) | null;
  postMessage(message: FromWorker, transfer?: Transferable[]): void;
  close(): void;
}

const scope = globalThis as unknown as WorkerScope;

/**
 * The ephemeral key of this worker's one session, drawn as the worker starts
 * (D-709): while the person answers the step-up, so that its X25519 (and the
 * compiling of that code) is done before the grant arrives. Only the hash of
 * its public half goes to the page.
 */
let ephemeral: Uint8Array | null = randomPrivateKey();
scope.postMessage({ op: "ephemeral", keyHash: ephemeralKeyHash(publicKey(ephemeral)) } satisfies FromWorker);

/** `bytes` as a view of a buffer of its own, to hand over without a copy. */
function owned(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : bytes.slice();
}

/**
 * Output waiting to go to the page. At most two batches are in flight: the
 * page says when the terminal has parsed one (`output_written`), and what the
 * socket brought meanwhile goes next as one transfer and one write of the
 * terminal (D-700). The second batch waits in the terminal's own queue while
 * it parses the first, so the page never idles for the round trip of
 * `output_written` (D-711). Output with fewer than two batches in flight (an
 * echo) goes at once. Every other message to the page goes after the output
 * before it.
 */
const OUTPUT_IN_FLIGHT_MAX = 1024 * 1024;
const BATCHES_IN_FLIGHT = 2;
let batch: Uint8Array[] = [];
let batched = 0;
let inFlight = 0;

function flushOutput(): void {
  if (batched === 0) return;
  let bytes: Uint8Array;
  if (batch.length === 1 && batch[0] !== undefined) {
    bytes = owned(batch[0]);
  } else {
    bytes = new Uint8Array(batched);
    let at = 0;
    for (const piece of batch) {
      bytes.set(piece, at);
      at += piece.length;
    }
  }
  batch = [];
  batched = 0;
  inFlight += 1;
  scope.postMessage({ op: "output", bytes } satisfies FromWorker, [bytes.buffer as ArrayBuffer]);
}

/** An event of the session for the page: after the output before it. */
function post(message: FromWorker, transfer: Transferable[] = []): void {
  flushOutput();
  scope.postMessage(message, transfer);
}

function queueOutput(bytes: Uint8Array): void {
  if (bytes.length === 0) return;
  batch.push(bytes);
  batched += bytes.length;
  // Bounded here: beyond the limit the terminal's own queue holds it.
  if (inFlight < BATCHES_IN_FLIGHT || batched >= OUTPUT_IN_FLIGHT_MAX) flushOutput();
}

/**
 * The device stream's WebSocket, the worker's own (D-716): what the socket
 * brings is decrypted where it arrives, and what the stream sends goes out
 * from here; the page's thread sees neither.
 */
class WorkerSocket implements StreamSocket {
  readonly #socket: WebSocket;
  onopen: (() => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: ((event: { code: number; reason: string }) => void) | null = null;
  onerror: (() => void) | null = null;

  constructor(url: string) {
    this.#socket = new WebSocket(url);
    this.#socket.binaryType = "arraybuffer";
    this.#socket.onopen = () => this.onopen?.();
    this.#socket.onmessage = (event: MessageEvent<unknown>) => this.onmessage?.(event);
    this.#socket.onclose = (event: CloseEvent) => this.onclose?.({ code: event.code, reason: event.reason });
    this.#socket.onerror = () => this.onerror?.();
  }

  get readyState(): number {
    return this.#socket.readyState;
  }

  send(data: string | Uint8Array): void {
    this.#socket.send(data);
  }

  close(code: number): void {
    this.#socket.close(code);
  }

  /** Ends the socket without a word to the stream (a detach). */
  drop(): void {
    this.#socket.onopen = null;
    this.#socket.onmessage = null;
    this.#socket.onclose = null;
    if (this.#socket.readyState === WebSocket.CONNECTING || this.#socket.readyState === WebSocket.OPEN) this.#socket.close(1000);
  }
}

/** The stream's URL on the worker's own origin (the console's). */
function streamUrl(path: string): string {
  const url = new URL(path, scope.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return url.href;
}

let socket: WorkerSocket | null = null;
let connection: StreamConnection | null = null;
let connecting = false;

const events: SessionEvents = {
  status: (text) => post({ op: "status", text }),
  output: queueOutput,
  replay: (begin) => post({ op: "replay", begin }),
  exit: (code) => post({ op: "exit", code }),
  end: (end, exitCode) => post({ op: "end", end, exitCode }),
};

scope.onmessage = (event: MessageEvent<ToWorker>) => {
  const message = event.data;
  switch (message.op) {
    case "connect":
      if (connecting || ephemeral === null) return;
      connecting = true;
      try {
        socket = new WorkerSocket(streamUrl(message.grant.stream_path));
      } catch {
        // The browser refused the stream's address (no secret is in it).
        ephemeral.fill(0);
        ephemeral = null;
        post({ op: "failed", message: "The browser did not open the session's stream. Reload the page and try again." });
        return;
      }
      StreamConnection.connect(socket, message.grant, message.hostId, ephemeral, message.columns, message.rows, events).then(
        (connected) => {
          connection = connected;
          post({ op: "connected" });
        },
        (error: unknown) => {
          if (error instanceof HandshakeEnd) {
            post({ op: "handshake_end", end: error.end });
          } else {
            post({ op: "failed", message: error instanceof Error ? error.message : String(error) });
          }
        },
      );
      // The initiator keeps a copy of its own.
      ephemeral.fill(0);
      ephemeral = null;
      break;
    case "output_written":
      inFlight = Math.max(0, inFlight - 1);
      flushOutput();
      break;
    case "send":
      connection?.send(message.bytes);
      break;
    case "resize":
      connection?.resize(message.columns, message.rows);
      break;
    case "close_session":
      connection?.closeSession();
      break;
    case "detach":
      socket?.drop();
      scope.close();
      break;
  }
};
