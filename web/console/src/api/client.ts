// The console's HTTP client: same origin, the HttpOnly cookie travels by
// itself, the CSRF token of the login goes in X-CSRF-Token. The CSRF token is
// kept in this tab's sessionStorage (D-404) so a reload keeps the login; it
// is no credential without the cookie. Nothing is ever written to
// localStorage, the console log or a URL.
import type { components } from "./schema.js";

export type Schemas = components["schemas"];

const CSRF_KEY = "bothy.console.csrf";

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly reason: string | undefined;
  constructor(status: number, code: string, detail: string, reason: string | undefined) {
    super(detail);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.reason = reason;
  }
}

export function csrfToken(): string | null {
  return sessionStorage.getItem(CSRF_KEY);
}

export function setCsrfToken(token: string | null): void {
  if (token === null) {
    sessionStorage.removeItem(CSRF_KEY);
  } else {
    sessionStorage.setItem(CSRF_KEY, token);
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A JSON request; a problem+json answer becomes an ApiError, a malformed answer too. */
export async function request<T>(method: "GET" | "POST", path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
  }
  const csrf = csrfToken();
  if (method === "POST" && csrf !== null) {
    headers["X-CSRF-Token"] = csrf;
  }
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      cache: "no-store",
      redirect: "error",
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch {
    throw new ApiError(0, "unreachable", "The server could not be reached.", undefined);
  }
  const text = await response.text();
  let value: unknown = undefined;
  if (text !== "") {
    try {
      value = JSON.parse(text);
    } catch {
      throw new ApiError(response.status, "malformed_answer", "The server's answer was not JSON.", undefined);
    }
  }
  if (!response.ok) {
    if (isObject(value) && typeof value.code === "string") {
      const reason = typeof value.reason === "string" ? value.reason : undefined;
      const detail = typeof value.detail === "string" ? value.detail : typeof value.title === "string" ? value.title : value.code;
      throw new ApiError(response.status, value.code, detail, reason);
    }
    throw new ApiError(response.status, "http_" + response.status, `The server answered ${response.status}.`, undefined);
  }
  if (value === undefined && response.status !== 204) {
    throw new ApiError(response.status, "malformed_answer", "The server's answer was empty.", undefined);
  }
  return value as T;
}

/** Checks that `value` is an object whose `keys` are strings; else a clear error. */
export function expectStrings<K extends string>(value: unknown, keys: readonly K[], what: string): Record<K, string> {
  if (!isObject(value)) {
    throw new ApiError(0, "malformed_answer", `The server's ${what} was not an object.`, undefined);
  }
  for (const key of keys) {
    if (typeof value[key] !== "string") {
      throw new ApiError(0, "malformed_answer", `The server's ${what} lacks ${key}.`, undefined);
    }
  }
  return value as Record<K, string>;
}

export function asObject(value: unknown, what: string): Record<string, unknown> {
  if (!isObject(value)) {
    throw new ApiError(0, "malformed_answer", `The server's ${what} was not an object.`, undefined);
  }
  return value;
}

/** The plain sentence for a problem. */
export function explain(error: unknown): string {
  if (error instanceof ApiError) {
    switch (error.code) {
      case "unauthenticated":
        return "You are not logged in (or your login expired).";
      case "step_up_required":
        return error.reason === "passkey_required"
          ? "This needs a passkey step-up."
          : "The step-up was missing, too old or already used; try again.";
      case "csrf_token_invalid":
        return "The page's login token is stale; log in again.";
      case "host_unavailable":
        return "The host is not connected.";
      case "terminal_denied":
        return `You may not open a terminal there (${error.reason ?? "denied"}).`;
      case "rate_limited":
        return "Too many attempts; wait a moment.";
      default:
        return `${error.message} (${error.code}${error.reason ? `: ${error.reason}` : ""})`;
    }
  }
  if (error instanceof DOMException && error.name === "NotAllowedError") {
    return "The passkey prompt was cancelled or timed out.";
  }
  return error instanceof Error ? error.message : "Something went wrong.";
}
