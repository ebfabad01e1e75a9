// The terminal view: the foreign-assignee warning (8.4), the pin check
// (5.5), the passkey step-up, the ephemeral key, open or attach, the
// device stream with Noise, xterm.js with the fit addon, the mobile
// extra-keys bar, the close codes of 13 as sentences, and the reattach after
// a lost connection (a new passkey step-up each time: the console has no
// device key, so quick reattach never applies to it, 6.2).
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { WebglAddon } from "@xterm/addon-webgl";

import { ApiError, asObject, explain, expectStrings, request } from "./api/client.js";
import { assertPasskey, passkeysSupported } from "./webauthn.js";
import { checkPin, storePin, type Pin } from "./pins.js";
import { toBase64Url } from "./bytes.js";
import { HandshakeEnd, readGrant, StreamWorker, TerminalConnection, type Grant } from "./session.js";
import { action, reaction, sentence, type StreamEnd } from "./close.js";
import { groupsOfFour, h, progress } from "./dom.js";
import { BROWSER_PIN_NOTE, navigate, show } from "./app.js";

export interface Me {
  principal_id: string;
  username: string;
  role: string;
}

export interface HostInfo {
  id: string;
  name: string;
  noise_public_key: string | null;
  key_generation: number;
  key_fingerprint: string | null;
  assigned_user_id: string | null;
}

type Target = { profile: string; workdirIndex?: number } | { attach: string };

const ATTACHED_KEY = "bothy.console.attached";
/** Tries of the automatic reattach after a lost connection. */
const REATTACH_TRIES = 3;

/** Asks a yes/no question in `place`; resolves with the answer. */
function confirmIn(place: HTMLElement, box: HTMLElement, yes: string, no: string): Promise<boolean> {
  return new Promise((resolve) => {
    place.replaceChildren(
      box,
      h(
        "div",
        { class: "row" },
        h("button", { "data-confirm": "yes", onclick: () => resolve(true) }, yes),
        h("button", { "data-confirm": "no", onclick: () => resolve(false) }, no),
      ),
    );
  });
}

/** The warning of 8.4 for an owner on a host assigned to another person. */
async function foreignAssigneeConfirmed(me: Me, host: HostInfo, status: HTMLElement): Promise<boolean> {
  if (host.assigned_user_id === null || me.role !== "owner" || me.principal_id === host.assigned_user_id) {
    return true;
  }
  return confirmIn(
    status,
    h(
      "p",
      { class: "hard-warning", "data-warning": "foreign-assignee" },
      "This host is assigned to another person. Your session runs as your own session user, but that person sets up and uses this host: with a local privilege escalation their processes could read along and control your session (spec 8.4).",
    ),
    "Open a session there anyway",
    "Cancel",
  );
}

/** The passkey step-up; its step_up_id, or null after a notice. */
export async function passkeyStepUp(status: HTMLElement): Promise<string | null> {
  if (!passkeysSupported()) {
    status.replaceChildren(h("p", { class: "notice", "data-notice": "no-passkey" }, "This browser offers no passkeys. The console's step-up takes a passkey only; use the bothy command-line client."));
    return null;
  }
  let start: Record<string, unknown>;
  try {
    start = asObject(await request("POST", "/api/v1/auth/step-up/passkey/start"), "step-up challenge");
  } catch (error) {
    if (error instanceof ApiError && error.code === "step_up_required") {
      status.replaceChildren(
        h(
          "p",
          { class: "notice", "data-notice": "no-passkey" },
          "You have no passkey, and the console's step-up takes a passkey only (no TOTP code here). Use the bothy command-line client, or add a passkey (log out, then \"Add a passkey\" on the login page).",
        ),
      );
      return null;
    }
    throw error;
  }
  const challenge = expectStrings(start, ["challenge_id"] as const, "step-up challenge");
  status.replaceChildren(progress("Step-up: waiting for your passkey…"));
  const credential = await assertPasskey(start.options);
  const done = expectStrings(
    await request("POST", "/api/v1/auth/step-up", { method: "webauthn", challenge_id: challenge.challenge_id, credential }),
    ["step_up_id"] as const,
    "step-up",
  );
  return done.step_up_id;
}

/** Resumes the session this tab had before a reload (a new step-up). */
export async function resumeAttached(me: Me): Promise<boolean> {
  const saved = sessionStorage.getItem(ATTACHED_KEY);
  if (saved === null) return false;
  let parsed: { session_id?: unknown; host_id?: unknown };
  try {
    parsed = JSON.parse(saved) as typeof parsed;
  } catch {
    sessionStorage.removeItem(ATTACHED_KEY);
    return false;
  }
  if (typeof parsed.session_id !== "string" || typeof parsed.host_id !== "string") {
    sessionStorage.removeItem(ATTACHED_KEY);
    return false;
  }
  const status = h("div", { id: "status" });
  show(h("h1", {}, "Reattaching"), status);
  try {
    const host = asObject(await request("GET", `/api/v1/hosts/${encodeURIComponent(parsed.host_id)}`), "host");
    const info: HostInfo = {
      id: parsed.host_id,
      name: String(host.name ?? ""),
      noise_public_key: typeof host.noise_public_key === "string" ? host.noise_public_key : null,
      key_generation: typeof host.key_generation === "number" ? host.key_generation : 0,
      key_fingerprint: typeof host.key_fingerprint === "string" ? host.key_fingerprint : null,
      assigned_user_id: typeof host.assigned_user_id === "string" ? host.assigned_user_id : null,
    };
    await openTerminal(me, info, { attach: parsed.session_id }, status, true);
  } catch (error) {
    sessionStorage.removeItem(ATTACHED_KEY);
    status.replaceChildren(h("p", { class: "error", role: "alert" }, explain(error)), h("button", { onclick: () => navigate("#/hosts") }, "Hosts"));
  }
  return true;
}

/** Opens (or attaches) and runs the terminal view. `status` shows the waits before the view. */
/**
 * xterm.js's WebGL renderer where the browser draws WebGL 2 on a GPU, else
 * its DOM renderer (D-702): a software rasterizer (SwiftShader, llvmpipe)
 * drew a burst here seven times slower than the DOM. A lost WebGL context
 * falls back to the DOM renderer for the rest of the view. The terminal's
 * element says which one draws (`data-renderer`).
 */
function useWebgl(term: Terminal, container: HTMLElement): void {
  container.dataset.renderer = "dom";
  if (!gpuWebgl()) return;
  let webgl: WebglAddon;
  try {
    webgl = new WebglAddon();
    term.loadAddon(webgl);
  } catch {
    return;
  }
  container.dataset.renderer = "webgl";
  webgl.onContextLoss(() => {
    webgl.dispose();
    container.dataset.renderer = "dom";
  });
}

/** Whether WebGL 2 is there and drawn by a GPU, not by a software rasterizer. */
function gpuWebgl(): boolean {
  const gl = document.createElement("canvas").getContext("webgl2");
  if (gl === null) return false;
  const info = gl.getExtension("WEBGL_debug_renderer_info");
  const renderer = info === null ? "" : String(gl.getParameter(info.UNMASKED_RENDERER_WEBGL));
  gl.getExtension("WEBGL_lose_context")?.loseContext();
  return renderer !== "" && !/swiftshader|llvmpipe|softpipe|software/i.test(renderer);
}

export async function openTerminal(me: Me, host: HostInfo, target: Target, status: HTMLElement, resumed = false): Promise<void> {
  try {
    if ("profile" in target && !(await foreignAssigneeConfirmed(me, host, status))) {
      status.replaceChildren(h("p", { class: "muted" }, "Not opened."));
      return;
    }
    if (host.noise_public_key === null || host.key_fingerprint === null) {
      status.replaceChildren(h("p", { class: "error" }, "This host is not paired: it has no key yet."));
      return;
    }
    const offered: Pin = { host_id: host.id, noise_public_key: host.noise_public_key, key_generation: host.key_generation, key_fingerprint: host.key_fingerprint };
    const check = await checkPin(offered);
    let pinChanged = false;
    if (check.kind === "changed") {
      const confirmed = await confirmIn(
        status,
        h(
          "div",
          { class: "hard-warning", "data-warning": "pin-changed" },
          h("p", {}, `WARNING: the key of host ${host.name} changed since your last session there.`),
          h("p", {}, "Pinned: ", h("span", { class: "fingerprint" }, groupsOfFour(check.old.key_fingerprint)), ` (generation ${check.old.key_generation})`),
          h("p", {}, "Now: ", h("span", { class: "fingerprint" }, groupsOfFour(offered.key_fingerprint)), ` (generation ${offered.key_generation})`),
          h("p", {}, "Connect only if the host was paired again on purpose (ask its owner). Your confirmation is recorded in the audit."),
        ),
        "The host was re-paired: connect",
        "Do not connect",
      );
      if (!confirmed) {
        status.replaceChildren(h("p", { class: "muted" }, "Not connected: the key change was not confirmed."));
        return;
      }
      pinChanged = true;
    }
    await runView(me, host, target, offered, pinChanged, status, resumed);
  } catch (error) {
    status.replaceChildren(h("p", { class: "error", role: "alert" }, explain(error)));
  }
}

/** The step-up and the grant of one attempt, asked with the ephemeral key of `worker`. */
async function stepUpAndGrant(
  host: HostInfo,
  target: Target,
  offered: Pin,
  pinChanged: boolean,
  columns: number,
  rows: number,
  status: HTMLElement,
  worker: StreamWorker,
): Promise<Grant | null> {
  const stepUpId = await passkeyStepUp(status);
  if (stepUpId === null) return null;
  // Drawn by the worker as it started; only the hash comes here (D-709).
  const hash = toBase64Url(await worker.ephemeralKeyHash());
  status.replaceChildren(progress("Opening the session…"));
  const body: Record<string, unknown> = { client_ephemeral_key_hash: hash, step_up_id: stepUpId };
  if (pinChanged) body.pin_changed = true;
  let answer: unknown;
  if ("profile" in target) {
    body.profile = target.profile;
    if (target.workdirIndex !== undefined) body.workdir_index = target.workdirIndex;
    body.columns = columns;
    body.rows = rows;
    answer = await request("POST", `/api/v1/hosts/${encodeURIComponent(host.id)}/terminal/sessions`, body);
  } else {
    answer = await request("POST", `/api/v1/terminal/sessions/${encodeURIComponent(target.attach)}/attach`, body);
  }
  const grant = readGrant(answer);
  if (grant.noise_public_key !== offered.noise_public_key || grant.key_generation !== offered.key_generation) {
    throw new Error("The server granted another host key than the host list showed; not connecting. Reload and check the host's fingerprint.");
  }
  return grant;
}

const EXTRA_KEYS: Array<[string, string]> = [
  ["Esc", "\x1b"],
  ["Tab", "\t"],
  ["Ctrl", "ctrl"],
  ["Alt", "alt"],
  ["←", "\x1b[D"],
  ["↑", "\x1b[A"],
  ["↓", "\x1b[B"],
  ["→", "\x1b[C"],
  ["|", "|"],
  ["~", "~"],
  ["/", "/"],
  ["-", "-"],
];

async function runView(me: Me, host: HostInfo, initial: Target, offered: Pin, pinChangedAtFirst: boolean, preStatus: HTMLElement, resumed: boolean): Promise<void> {
  const status = h("div", { class: "session-status", role: "status", "data-session-status": "" });
  const container = h("div", { class: "terminal-host", "data-terminal": "" });
  const bar = h("div", { class: "extra-keys", role: "toolbar", "aria-label": "Extra keys" });
  const detachButton = h("button", {}, "Detach");
  const closeButton = h("button", {}, "Close session");
  const view = h(
    "section",
    { class: "terminal-view" },
    h("header", { class: "bar" }, h("h1", {}, host.name), h("div", { class: "row" }, detachButton, closeButton, h("button", { onclick: () => leave() }, "Hosts"))),
    status,
    container,
    bar,
    h("p", { class: "muted pin-note" }, BROWSER_PIN_NOTE),
  );
  show(view);
  void preStatus;

  // A steady cursor: a blink restarted by every key makes Chromium draw a
  // frame before it runs the echo's messages (D-708).
  const term = new Terminal({ cursorBlink: false, scrollback: 5000, fontSize: 14, allowProposedApi: false, convertEol: false });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(container);
  useWebgl(term, container);
  fit.fit();

  let connection: TerminalConnection | null = null;
  let sessionId: string | null = "attach" in initial ? initial.attach : null;
  let ctrl = false;
  let alt = false;
  const modifierButtons: Record<string, HTMLButtonElement> = {};
  const encoder = new TextEncoder();
  const sendText = (data: string) => {
    if (connection === null) return;
    let text = data;
    if (ctrl && text.length === 1) {
      const code = text.toUpperCase().charCodeAt(0);
      if (code >= 0x40 && code <= 0x5f) text = String.fromCharCode(code - 0x40);
      else if (text === " ") text = "\x00";
    }
    if (alt) text = "\x1b" + text;
    if (ctrl || alt) {
      ctrl = false;
      alt = false;
      for (const button of Object.values(modifierButtons)) button.setAttribute("aria-pressed", "false");
    }
    connection.send(encoder.encode(text));
  };
  for (const [label, value] of EXTRA_KEYS) {
    const button = h("button", { type: "button", "data-key": label, "aria-pressed": value === "ctrl" || value === "alt" ? "false" : undefined }, label);
    button.addEventListener("pointerdown", (event) => event.preventDefault());
    button.addEventListener("click", () => {
      if (value === "ctrl" || value === "alt") {
        if (value === "ctrl") ctrl = !ctrl;
        else alt = !alt;
        button.setAttribute("aria-pressed", String(value === "ctrl" ? ctrl : alt));
      } else {
        sendText(value);
      }
      term.focus();
    });
    if (value === "ctrl" || value === "alt") modifierButtons[value] = button;
    bar.append(button);
  }
  term.onData((data) => sendText(data));
  term.onBinary((data) => {
    if (connection !== null) connection.send(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff));
  });
  term.onResize(({ cols, rows }) => connection?.resize(cols, rows));
  let disposed = false;
  const refit = () => {
    if (disposed || !container.isConnected) return;
    fit.fit();
    // Keep the cursor line in view above a soft keyboard.
    term.scrollToBottom();
  };
  window.addEventListener("resize", refit);
  window.visualViewport?.addEventListener("resize", refit);

  let leaving = false;
  const leave = () => {
    leaving = true;
    connection?.detach();
    sessionStorage.removeItem(ATTACHED_KEY);
    window.removeEventListener("resize", refit);
    window.visualViewport?.removeEventListener("resize", refit);
    disposed = true;
    term.dispose();
    navigate("#/hosts");
  };
  detachButton.addEventListener("click", () => leave());
  closeButton.addEventListener("click", () => {
    status.replaceChildren(progress("Closing the session…"));
    connection?.closeSession();
  });

  // After an end the terminal stays readable but takes no input: no
  // half-working terminal (a new attempt enables it again).
  const stop = () => {
    connection = null;
    term.options.disableStdin = true;
    view.setAttribute("data-ended", "");
  };
  const ended = (end: StreamEnd, exitCode: number | null, duringHandshake = false) => {
    stop();
    if (leaving) return;
    if (exitCode !== null && end.code === 4100 && end.reason === "process_exited") {
      sessionStorage.removeItem(ATTACHED_KEY);
      status.replaceChildren(h("p", { class: "notice", "data-exit": String(exitCode) }, `The program exited with status ${exitCode}. The session has ended.`), h("button", { onclick: () => leave() }, "Back to the hosts"));
      return;
    }
    const what = action(end);
    if (what === "reattach" && sessionId !== null) {
      void attempt({ attach: sessionId }, false, 1);
      return;
    }
    if (reaction(end) !== "replaced" && reaction(end) !== "host_unavailable") {
      sessionStorage.removeItem(ATTACHED_KEY);
    }
    const text =
      duringHandshake && reaction(end) === "other"
        ? `The connection closed before the handshake with the host finished (code ${end.code}). Nothing runs in this tab; open or attach again.`
        : sentence(end);
    const box = h("p", { class: reaction(end) === "hard_warning" ? "hard-warning" : "notice", "data-close": String(end.code) }, text);
    const buttons = h("div", { class: "row" });
    if (what === "open_again" && "profile" in initial) {
      buttons.append(h("button", { onclick: () => void attempt(initial, false, REATTACH_TRIES) }, "Open again"));
    }
    if ((what === "open_again" || what === "attach_again") && sessionId !== null) {
      buttons.append(h("button", { onclick: () => void attempt({ attach: sessionId ?? "" }, false, REATTACH_TRIES) }, "Attach again"));
    }
    buttons.append(h("button", { onclick: () => leave() }, "Back to the hosts"));
    status.replaceChildren(box, buttons);
  };

  const attempt = async (target: Target, pinChanged: boolean, tryNumber: number): Promise<void> => {
    if ("attach" in target && tryNumber > 0 && !resumed) {
      status.replaceChildren(progress(`The connection was lost. Reattaching (try ${tryNumber} of ${REATTACH_TRIES})…`));
    }
    // Started now, it is ready when the grant arrives (D-709).
    const worker = new StreamWorker();
    let workerHanded = false;
    try {
      const grant = await stepUpAndGrant(host, target, offered, pinChanged, term.cols, term.rows, status, worker);
      if (grant === null) {
        stop();
        return;
      }
      sessionId = grant.session_id;
      sessionStorage.setItem(ATTACHED_KEY, JSON.stringify({ session_id: sessionId, host_id: host.id }));
      workerHanded = true;
      connection = await TerminalConnection.connect(worker, grant, host.id, term.cols, term.rows, {
        status: (text) => status.replaceChildren(progress(text)),
        output: (bytes, written) => term.write(bytes, written),
        replay: (begin) => {
          if (begin) {
            term.reset();
            status.replaceChildren(progress("Replaying the session's recent output…"));
          } else {
            status.replaceChildren();
          }
        },
        exit: () => {},
        end: ended,
      });
      term.options.disableStdin = false;
      view.removeAttribute("data-ended");
      // The first successful open pins the key; a confirmed change re-pins it.
      await storePin(offered);
      status.replaceChildren();
      term.focus();
    } catch (error) {
      if (error instanceof HandshakeEnd) {
        if (reaction(error.end) === "reattach" && "attach" in target && tryNumber < REATTACH_TRIES) {
          await new Promise((r) => setTimeout(r, 1000 * tryNumber));
          return attempt(target, false, tryNumber + 1);
        }
        ended(error.end, null, true);
        return;
      }
      stop();
      status.replaceChildren(h("p", { class: "error", role: "alert" }, explain(error)), h("button", { onclick: () => leave() }, "Back to the hosts"));
    } finally {
      // Not handed to a connection (no step-up, no grant): it ends here. A
      // connection that fails ends its worker itself.
      if (!workerHanded) worker.terminate();
    }
  };
  void me;
  await attempt(initial, pinChangedAtFirst, 0);
}
