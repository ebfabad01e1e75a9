// How a device stream ends (spec 24, section 13), for the console: the close
// code and the close text (close_reason for 4100, close_detail for 4101 and
// 4104) become one plain sentence and the action the view offers. The
// console's twin of crates/cli/src/close.rs.

export type Reaction =
  /** 4100: the session ended; no reconnect. */
  | "ended"
  /** 4101: open or attach again, with a new passkey step-up. */
  | "open_again"
  /** 4104: a hard warning; no new attempt. */
  | "hard_warning"
  /** 4103: another device attached; no automatic reconnect. */
  | "replaced"
  /** 4102: the host is away; a started session stays detached. */
  | "host_unavailable"
  /** A lost connection or a server restart: the tab reattaches by itself. */
  | "reattach"
  /** Anything else. */
  | "other";

export interface StreamEnd {
  code: number;
  reason: string;
}

const CODE_NAMES: Record<number, string> = {
  4000: "unknown_error",
  4002: "invalid_message",
  4004: "credential_invalid",
  4008: "rate_limited",
  4009: "heartbeat_timeout",
  4012: "credential_revoked",
  4013: "server_shutdown",
  4014: "slow_consumer",
  4100: "terminal_closed",
  4101: "terminal_token_stale",
  4102: "terminal_host_unavailable",
  4103: "terminal_replaced",
  4104: "terminal_handshake_failed",
};

/** The code's name of section 13 (or chapter 04), else `closed_<n>`. */
export function codeName(code: number): string {
  return CODE_NAMES[code] ?? `closed_${code}`;
}

export function reaction(end: StreamEnd): Reaction {
  switch (end.code) {
    case 4100:
      return "ended";
    case 4101:
      return "open_again";
    case 4102:
      return "host_unavailable";
    case 4103:
      return "replaced";
    case 4104:
      return "hard_warning";
    case 1001:
    case 1006:
    case 4013:
      return "reattach";
    default:
      return "other";
  }
}

const REASONS: Record<string, string> = {
  client_closed: "you closed the session",
  closed_by_owner: "an owner closed the session",
  process_exited: "the program ended",
  idle_timeout: "the session was idle too long",
  max_duration: "the session reached its maximum duration",
  detach_expired: "the session was detached too long",
  access_revoked: "your access to the host was revoked",
  i6_violation: "the host's LLM login changed (I6)",
  host_disabled: "the host was disabled",
  host_retired: "the host was retired",
  host_rekeyed: "the host was paired again",
  host_restarted: "the host service restarted",
  user_disabled: "your account was disabled",
  device_revoked: "this device was revoked",
  session_revoked: "your login session was revoked",
  logout: "you logged out",
  open_failed: "the opening failed",
  host_policy_violation: "a check of the host service failed",
};

/** A close text is shown only when it is a code (snake_case), never free text. */
function safeCode(reason: string): string {
  return /^[a-z0-9_]{1,64}$/.test(reason) ? reason : "";
}

/** The sentence the view shows. */
export function sentence(end: StreamEnd): string {
  const code = safeCode(end.reason);
  switch (reaction(end)) {
    case "ended":
      return `The session ended: ${REASONS[code] ?? "the session ended"}${code ? ` (${code})` : ""}.`;
    case "open_again":
      return `The session token was not accepted${code ? ` (${code})` : ""}. Open or attach again; it asks for your passkey again.`;
    case "hard_warning":
      return `Warning: the host refused the handshake or the token${code ? ` (${code})` : ""}. This can mean that someone tampers with the connection. The console will not retry; tell the owner of the server and of the host.`;
    case "replaced":
      return "The session was taken over by another device. This tab lets go and does not reconnect; attach again to take it back.";
    case "host_unavailable":
      return "The host is unavailable: the session is detached and keeps running there. Attach again later.";
    case "reattach":
      return "The connection was lost. Reattaching…";
    case "other":
      return `The connection closed (code ${end.code}${code ? `: ${code}` : ""}).`;
  }
}

/** What the view offers after the end. */
export function action(end: StreamEnd): "open_again" | "attach_again" | "none" | "reattach" {
  switch (reaction(end)) {
    case "open_again":
      return "open_again";
    case "replaced":
    case "host_unavailable":
    case "other":
      return "attach_again";
    case "reattach":
      return "reattach";
    case "ended":
    case "hard_warning":
      return "none";
  }
}
