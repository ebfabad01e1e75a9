// What the page and the stream worker (stream_worker.ts) share: the grant of
// open and attach, the events of a running session, the end of a handshake,
// and the messages between the two (docs/decisions.md D-700).
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
  /**
   * Filtered output for the terminal; `written`, where given, is called once
   * the terminal has parsed it (the page's pace, D-700).
   */
  output(bytes: Uint8Array, written?: () => void): void;
  replay(begin: boolean): void;
  exit(code: number): void;
  /** The end of the stream: its close code and text (1006 for a lost connection). */
  end(end: StreamEnd, exitCode: number | null): void;
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

/** `readyState` of a socket, as WebSocket's. */
export const SOCKET_OPEN = 1;
export const SOCKET_CLOSED = 3;

/**
 * What the stream needs of its WebSocket: the worker's real one
 * (stream_worker.ts), or the socket a unit test plays.
 */
export interface StreamSocket {
  readonly readyState: number;
  onopen: (() => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: (() => void) | null;
  send(data: string | Uint8Array): void;
  close(code: number): void;
}

/** What the page tells the worker, in the order it happened. */
export type ToWorker =
  | {
      op: "connect";
      grant: Grant;
      hostId: string;
      columns: number;
      rows: number;
    }
  | { op: "send"; bytes: Uint8Array }
  | { op: "resize"; columns: number; rows: number }
  | { op: "close_session" }
  /** Leave the session detached: the worker closes its socket and ends. */
  | { op: "detach" }
  /** The terminal parsed the last output batch: the next may come (D-700). */
  | { op: "output_written" };

/** What the worker tells the page, in the order it happened. */
export type FromWorker =
  /**
   * The first message of every worker: SHA-256 of the public half of the
   * ephemeral key it drew for its one session (5.2), for the open or attach
   * request. The private half never leaves the worker (D-709).
   */
  | { op: "ephemeral"; keyHash: Uint8Array }
  | { op: "status"; text: string }
  | { op: "connected" }
  | { op: "handshake_end"; end: StreamEnd }
  | { op: "output"; bytes: Uint8Array }
  | { op: "replay"; begin: boolean }
  | { op: "exit"; code: number }
  | { op: "end"; end: StreamEnd; exitCode: number | null }
  /** The worker could not run the stream (an error of its own, not the server's). */
  | { op: "failed"; message: string };
