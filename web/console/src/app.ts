// The console's pages, navigated by the URL fragment: #/login, #/enroll,
// #/hosts, #/terminal. Everything is built with DOM calls and textContent: no
// HTML from the server or from terminal output reaches innerHTML.
import { ApiError, asObject, explain, expectStrings, request, setCsrfToken, csrfToken } from "./api/client.js";
import { assertPasskey, createPasskey, passkeysSupported } from "./webauthn.js";
import { deletePins } from "./pins.js";
import { groupsOfFour, h, progress } from "./dom.js";
import { qrSvg, totpSecret } from "./qr.js";
import { openTerminal, passkeyStepUp, resumeAttached, type HostInfo, type Me } from "./terminal_view.js";

let root: HTMLElement;

export function start(element: HTMLElement | null): void {
  if (element === null) return;
  root = element;
  window.addEventListener("hashchange", () => void route());
  void route();
}

export function show(...children: (Node | string)[]): void {
  root.replaceChildren(...children);
}

export function navigate(hash: string): void {
  if (window.location.hash === hash) {
    void route();
  } else {
    window.location.hash = hash;
  }
}

async function route(): Promise<void> {
  const hash = window.location.hash;
  if (hash.startsWith("#/enroll")) {
    enrollPage();
    return;
  }
  if (hash.startsWith("#/passkey")) {
    firstPasskeyPage();
    return;
  }
  const me = await whoami();
  if (me === null) {
    loginPage();
    return;
  }
  if (await resumeAttached(me)) {
    return;
  }
  await hostsPage(me);
}

async function whoami(): Promise<Me | null> {
  if (csrfToken() === null) return null;
  try {
    const session = asObject(await request("GET", "/api/v1/auth/session"), "session");
    const fields = expectStrings(session, ["principal_id", "username", "role"] as const, "session");
    return { principal_id: fields.principal_id, username: fields.username, role: fields.role };
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      setCsrfToken(null);
      return null;
    }
    throw error;
  }
}

function errorBox(error: unknown): HTMLElement {
  return h("p", { class: "error", role: "alert" }, explain(error));
}

const BROWSER_PIN_NOTE =
  "Host keys are pinned in this browser, but a pin in a browser does not protect against the server itself: the server delivers this page. Against a malicious server only the host's local confirmation helps (spec 5.1).";

function loginPage(): void {
  const username = h("input", { name: "username", autocomplete: "username webauthn", required: true });
  const password = h("input", { name: "password", type: "password", autocomplete: "current-password", required: true });
  const status = h("div");
  const form = h(
    "form",
    {
      id: "login",
      onsubmit: (event: Event) => {
        event.preventDefault();
        void login(username.value.trim(), password.value, status);
      },
    },
    h("label", {}, "Username", username),
    h("label", {}, "Password", password),
    h("button", { type: "submit" }, "Log in with passkey"),
  );
  show(
    h("h1", {}, "bothy console"),
    form,
    status,
    h("p", { class: "muted" }, "Logging in needs your password and your passkey. New here? ", h("a", { href: "#/enroll" }, "Enroll with your code"), "."),
    h(
      "p",
      { class: "muted" },
      "Enrolled with the bothy command-line client and no passkey yet? ",
      h("a", { href: "#/passkey", id: "add-passkey" }, "Add a passkey with your password and TOTP code"),
      "; the console's login and step-up take passkeys only.",
    ),
  );
  if (!passkeysSupported()) {
    status.replaceChildren(h("p", { class: "notice" }, "This browser offers no passkeys (WebAuthn); the console needs one."));
  }
}

async function login(username: string, password: string, status: HTMLElement): Promise<void> {
  try {
    status.replaceChildren(progress("Starting the login…"));
    const start = asObject(await request("POST", "/api/v1/auth/console/login/start", { username }), "login challenge");
    const challenge = expectStrings(start, ["challenge_id"] as const, "login challenge");
    status.replaceChildren(progress("Waiting for your passkey…"));
    const credential = await assertPasskey(start.options);
    status.replaceChildren(progress("Checking…"));
    const done = expectStrings(
      await request("POST", "/api/v1/auth/console/login/finish", { username, password, challenge_id: challenge.challenge_id, credential }),
      ["csrf_token", "login_session_id"] as const,
      "login",
    );
    setCsrfToken(done.csrf_token);
    navigate("#/hosts");
  } catch (error) {
    status.replaceChildren(errorBox(error));
  }
}

export async function logout(): Promise<void> {
  try {
    await request("POST", "/api/v1/auth/logout");
  } catch {
    // The login is gone either way for this tab.
  }
  setCsrfToken(null);
  sessionStorage.clear();
  await deletePins();
  navigate("#/login");
}

/**
 * D-408: a person enrolled with the CLI registers a first passkey. Password
 * and TOTP code here only authorize the registration: no login session comes
 * of it, and the console's login and step-up still take the passkey only.
 */
function firstPasskeyPage(): void {
  const username = h("input", { name: "username", autocomplete: "username", required: true, spellcheck: "false" });
  const password = h("input", { name: "password", type: "password", autocomplete: "current-password", required: true });
  const totp = h("input", { name: "totp", inputmode: "numeric", autocomplete: "one-time-code", pattern: "[0-9]{6}", required: true });
  const status = h("div");
  const form = h(
    "form",
    {
      id: "first-passkey",
      onsubmit: (event: Event) => {
        event.preventDefault();
        void addFirstPasskey(username.value.trim(), password.value, totp.value.trim(), form, status);
      },
    },
    h("label", {}, "Username", username),
    h("label", {}, "Password", password),
    h("label", {}, "Your authenticator app's current code", totp),
    h("button", { type: "submit" }, "Create a passkey"),
  );
  show(
    h("h1", {}, "Add a passkey"),
    h(
      "p",
      {},
      "For a person enrolled with the bothy command-line client. Your password and TOTP code only allow registering a passkey here; they do not log you in. Then log in to the console with your password and the new passkey.",
    ),
    form,
    status,
    h("p", {}, h("a", { href: "#/login" }, "Back to the login")),
  );
  if (!passkeysSupported()) {
    status.replaceChildren(h("p", { class: "notice" }, "This browser offers no passkeys (WebAuthn); the console needs one."));
  }
}

async function addFirstPasskey(username: string, password: string, totp: string, form: HTMLElement, status: HTMLElement): Promise<void> {
  try {
    status.replaceChildren(progress("Checking your password and code…"));
    const start = asObject(await request("POST", "/api/v1/auth/passkeys/first/start", { username, password, totp }), "passkey challenge");
    const challenge = expectStrings(start, ["challenge_id"] as const, "passkey challenge");
    status.replaceChildren(progress("Create your passkey when the browser asks…"));
    const credential = await createPasskey(start.options);
    status.replaceChildren(progress("Registering the passkey…"));
    expectStrings(
      await request("POST", "/api/v1/auth/passkeys/first/finish", { username, password, challenge_id: challenge.challenge_id, credential }),
      ["passkey_id"] as const,
      "passkey registration",
    );
    form.replaceChildren();
    status.replaceChildren(
      h("p", { class: "notice", "data-notice": "passkey-added" }, "Your passkey is registered. Log in with your password and the passkey."),
      h("a", { href: "#/login" }, "Log in"),
    );
  } catch (error) {
    if (error instanceof ApiError && error.code === "unauthenticated") {
      status.replaceChildren(h("p", { class: "error", role: "alert" }, "The username, the password or the code is not right, or the code was used already: wait for the next code."));
      return;
    }
    if (error instanceof ApiError && error.code === "conflict" && error.reason === "passkey_exists") {
      status.replaceChildren(h("p", { class: "error", role: "alert" }, "You have a passkey already: log in with it. Another one cannot be added with password and code."));
      return;
    }
    status.replaceChildren(errorBox(error));
  }
}

function enrollPage(): void {
  const code = h("input", { name: "code", autocomplete: "one-time-code", required: true, spellcheck: "false" });
  const password = h("input", { name: "password", type: "password", autocomplete: "new-password", minlength: "12", required: true });
  const again = h("input", { name: "password2", type: "password", autocomplete: "new-password", required: true });
  const status = h("div");
  const form = h(
    "form",
    {
      id: "enroll",
      onsubmit: (event: Event) => {
        event.preventDefault();
        if (password.value !== again.value) {
          status.replaceChildren(h("p", { class: "error" }, "The two passwords differ."));
          return;
        }
        void enroll(code.value.trim(), password.value, status);
      },
    },
    h("label", {}, "Enrollment code", code),
    h("label", {}, "New password (at least 12 characters)", password),
    h("label", {}, "The password again", again),
    h("button", { type: "submit" }, "Enroll"),
  );
  show(h("h1", {}, "Enroll"), form, status, h("p", {}, h("a", { href: "#/login" }, "Back to the login")));
}

async function enroll(code: string, password: string, status: HTMLElement): Promise<void> {
  try {
    status.replaceChildren(progress("Enrolling…"));
    const enrolled = expectStrings(await request("POST", "/api/v1/auth/enroll", { code, password }), ["otpauth_uri", "username"] as const, "enrollment");
    // The passkey: the console's login and step-up need it.
    status.replaceChildren(progress("Create your passkey when the browser asks…"));
    const start = asObject(await request("POST", "/api/v1/auth/enroll/passkey/start", { code }), "passkey challenge");
    const challenge = expectStrings(start, ["challenge_id"] as const, "passkey challenge");
    const credential = await createPasskey(start.options);
    await request("POST", "/api/v1/auth/enroll/passkey/finish", { code, challenge_id: challenge.challenge_id, credential });
    const totp = h("input", { name: "totp", inputmode: "numeric", autocomplete: "one-time-code", pattern: "[0-9]{6}", required: true });
    const confirmStatus = h("div");
    status.replaceChildren(
      h("p", {}, `Your username is ${enrolled.username}. Your passkey is registered.`),
      h("p", {}, "Scan this TOTP secret with your authenticator app (the command-line client's step-up uses it), or type the secret in:"),
      h("div", { class: "qr" }, qrSvg(enrolled.otpauth_uri)),
      h("p", { class: "totp-secret", "data-totp-secret": "" }, totpSecret(enrolled.otpauth_uri)),
      h(
        "form",
        {
          id: "confirm",
          onsubmit: (event: Event) => {
            event.preventDefault();
            void confirmEnrollment(code, totp.value.trim(), confirmStatus);
          },
        },
        h("label", {}, "The app's current code", totp),
        h("button", { type: "submit" }, "Confirm"),
      ),
      confirmStatus,
    );
  } catch (error) {
    status.replaceChildren(errorBox(error));
  }
}

async function confirmEnrollment(code: string, totp: string, status: HTMLElement): Promise<void> {
  try {
    status.replaceChildren(progress("Confirming…"));
    await request("POST", "/api/v1/auth/enroll/confirm", { code, totp });
    status.replaceChildren(h("p", { class: "notice" }, "Enrolled. You can log in now."), h("a", { href: "#/login" }, "Log in"));
  } catch (error) {
    status.replaceChildren(errorBox(error));
  }
}

function remaining(ms: number): string {
  if (!Number.isFinite(ms) || ms <= 0) return "—";
  const minutes = Math.floor(ms / 60_000);
  return minutes >= 60 ? `${Math.floor(minutes / 60)} h ${minutes % 60} min` : `${minutes} min`;
}

function llmBadge(value: unknown): string {
  switch (value) {
    case "personal":
      return "Personal";
    case "organization":
      return "Organization";
    default:
      return "None";
  }
}

/** The host's reported profiles, shells first; a claude profile needs a working directory (the first). */
function profilesOf(host: Record<string, unknown>): Array<{ name: string; label: string; claude: boolean }> {
  const reported = host.reported_profiles;
  const out: Array<{ name: string; label: string; claude: boolean }> = [];
  if (Array.isArray(reported)) {
    for (const entry of reported) {
      if (typeof entry === "object" && entry !== null && typeof (entry as { name?: unknown }).name === "string") {
        const e = entry as { name: string; display_name?: unknown; kind?: unknown };
        out.push({ name: e.name, label: typeof e.display_name === "string" ? e.display_name : e.name, claude: e.kind === "claude" });
      }
    }
  }
  out.sort((a, b) => Number(a.claude) - Number(b.claude));
  return out.length > 0 ? out : [{ name: "shell", label: "shell", claude: false }];
}

async function hostsPage(me: Me): Promise<void> {
  show(h("h1", {}, "Hosts"), progress("Loading the hosts…"));
  let hosts: Record<string, unknown>[];
  let sessions: Record<string, unknown>[];
  try {
    const list = asObject(await request("GET", "/api/v1/hosts"), "host list");
    if (!Array.isArray(list.hosts)) throw new ApiError(0, "malformed_answer", "The host list lacks hosts.", undefined);
    hosts = list.hosts.map((host) => asObject(host, "host"));
    const open = asObject(await request("GET", "/api/v1/terminal/sessions?state=open"), "session list");
    if (!Array.isArray(open.sessions)) throw new ApiError(0, "malformed_answer", "The session list lacks sessions.", undefined);
    sessions = open.sessions.map((s) => asObject(s, "session")).filter((s) => s.person_id === me.principal_id);
  } catch (error) {
    show(h("h1", {}, "Hosts"), errorBox(error), h("button", { onclick: () => navigate("#/hosts") }, "Reload"));
    return;
  }
  const status = h("div", { id: "status" });
  const rows = hosts.map((host) => {
    const hostId = String(host.id ?? "");
    const info: HostInfo = {
      id: hostId,
      name: String(host.name ?? ""),
      noise_public_key: typeof host.noise_public_key === "string" ? host.noise_public_key : null,
      key_generation: typeof host.key_generation === "number" ? host.key_generation : 0,
      key_fingerprint: typeof host.key_fingerprint === "string" ? host.key_fingerprint : null,
      assigned_user_id: typeof host.assigned_user_id === "string" ? host.assigned_user_id : null,
    };
    const profiles = profilesOf(host);
    const profile = h("select", { "aria-label": "Profile" }, ...profiles.map((p) => h("option", { value: p.name }, p.label)));
    const target = () => {
      const chosen = profiles.find((p) => p.name === profile.value);
      return chosen?.claude ? { profile: profile.value, workdirIndex: 0 } : { profile: profile.value };
    };
    const mine = sessions.filter((s) => s.host_id === hostId);
    const sessionList = h(
      "ul",
      {},
      ...mine.map((s) => {
        const sessionId = String(s.session_id ?? "");
        return h(
          "li",
          { "data-session": sessionId },
          `${sessionId.slice(0, 8)} · ${String(s.state ?? "")} · ${String(s.profile ?? "")} · ${remaining(Number(s.remaining_ms))} left `,
          h("button", { onclick: () => void openTerminal(me, info, { attach: sessionId }, status) }, "Attach"),
          " ",
          h("button", { onclick: () => void closeSession(sessionId, status, me) }, "Close"),
        );
      }),
    );
    return h(
      "tr",
      { "data-host": hostId },
      h("td", {}, info.name),
      h("td", {}, String(host.state ?? ""), host.connected === true ? " · connected" : host.connected === false ? " · not connected" : ""),
      h("td", {}, h("span", { class: "badge" }, llmBadge(host.llm_credentials))),
      h("td", { class: "fingerprint" }, info.key_fingerprint ? groupsOfFour(info.key_fingerprint) : "not paired"),
      h(
        "td",
        {},
        h("div", { class: "row" }, profile, h("button", { onclick: () => void openTerminal(me, info, target(), status) }, "Open")),
        sessionList,
      ),
    );
  });
  show(
    h(
      "header",
      { class: "bar" },
      h("h1", {}, "Hosts"),
      h("div", { class: "row" }, h("span", { class: "muted" }, me.username), h("button", { onclick: () => navigate("#/hosts") }, "Reload"), h("button", { onclick: () => void addPasskey(status) }, "Add a passkey"), h("button", { onclick: () => void logout() }, "Log out")),
    ),
    status,
    hosts.length === 0
      ? h("p", {}, "No host is shared with you yet.")
      : h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "Host"), h("th", {}, "State"), h("th", {}, "LLM"), h("th", {}, "Key fingerprint"), h("th", {}, "Sessions"))),
          h("tbody", {}, ...rows),
        ),
    h("p", { class: "muted" }, BROWSER_PIN_NOTE),
  );
}

/**
 * Another passkey for the person logged in (a second device, a spare): a
 * step-up with a passkey they have, which the registration consumes, then
 * the new one on a click of its own (the browser may want a fresh gesture
 * for it, and the person may have to pick another authenticator).
 */
async function addPasskey(status: HTMLElement): Promise<void> {
  try {
    const stepUpId = await passkeyStepUp(status);
    // Without a passkey the step-up showed its notice.
    if (stepUpId === null) return;
    const start = asObject(await request("POST", "/api/v1/auth/passkeys/start", { step_up_id: stepUpId }), "passkey challenge");
    const challenge = expectStrings(start, ["challenge_id"] as const, "passkey challenge");
    await new Promise<void>((resolve) => {
      status.replaceChildren(
        h("p", {}, "Confirmed. Now create the new passkey; pick the device or security key it should live on when the browser asks."),
        h("button", { "data-add-passkey": "create", onclick: () => resolve() }, "Create the new passkey"),
      );
    });
    status.replaceChildren(progress("Create the new passkey when the browser asks…"));
    const credential = await createPasskey(start.options);
    await request("POST", "/api/v1/auth/passkeys/finish", { challenge_id: challenge.challenge_id, credential });
    status.replaceChildren(h("p", { class: "notice", "data-notice": "another-passkey-added" }, "The new passkey is added. You can log in and step up with any of your passkeys."));
  } catch (error) {
    status.replaceChildren(errorBox(error));
  }
}

async function closeSession(sessionId: string, status: HTMLElement, me: Me): Promise<void> {
  try {
    status.replaceChildren(progress("Closing the session…"));
    await request("POST", `/api/v1/terminal/sessions/${encodeURIComponent(sessionId)}/close`);
    await hostsPage(me);
  } catch (error) {
    status.replaceChildren(errorBox(error));
  }
}

export { BROWSER_PIN_NOTE, errorBox };
