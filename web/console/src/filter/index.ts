// The output filter of the terminal view (spec 24, 11.2; TM-T14): the
// console's port of crates/cli/src/filter.rs, byte for byte the same output.
// The cases both filters must pass are in tests/filter-cases.json at the
// repository's root, read by the Rust tests of crates/cli and by
// web/console/test/filter.test.ts.
//
// - OSC 52 (clipboard) is dropped.
// - OSC 8 hyperlinks become their text followed by the target in brackets:
//   never a clickable link.
// - The title and icon-label reports of XTWINOPS (CSI 20 t, CSI 21 t) are
//   dropped: their answer is text the remote chose, typed back into its input.
// - C1 controls (raw 8-bit or UTF-8 encoded, U+0080..U+009F) are dropped.
//
// Everything else passes byte for byte. The Rust filter frames raw bytes
// beside the `vte` parser; this port carries a small model of that parser
// (`Vte` below: the states, parameters, OSC parameters and the UTF-8 decoding
// of vte 0.15 fed one byte at a time) so that each byte gets the same verdict.
// A sequence is emitted, dropped or rewritten whole once it is complete; a
// string sequence longer than MAX_STRING is dropped whole without buffering.

/** The longest string sequence (OSC, DCS, SOS/PM/APC) that is kept. */
export const MAX_STRING = 1 << 20;

const ESC = 0x1b;
const BEL = 0x07;
const CAN = 0x18;
const SUB = 0x1a;
const MAX_PARAMS = 32;
const MAX_INTERMEDIATES = 2;
const MAX_OSC_PARAMS = 16;

type Framing =
  | { kind: "ground" }
  | { kind: "esc"; intermediate: boolean }
  | { kind: "csi" }
  | { kind: "osc" }
  | { kind: "dcs" }
  | { kind: "str" };

type OscVerdict = { kind: "pass" } | { kind: "drop" } | { kind: "link_open"; target: string } | { kind: "link_close" };

/** What the parser reported for the byte just fed. */
interface Events {
  printed: number | null;
  executed: number | null;
  csi: boolean | null;
  esc: boolean;
  osc: OscVerdict | null;
  hooked: boolean | null;
  unhooked: boolean;
}

function noEvents(): Events {
  return { printed: null, executed: null, csi: null, esc: false, osc: null, hooked: null, unhooked: false };
}

type VteState =
  | "ground"
  | "escape"
  | "escape_intermediate"
  | "csi_entry"
  | "csi_param"
  | "csi_intermediate"
  | "csi_ignore"
  | "dcs_entry"
  | "dcs_param"
  | "dcs_intermediate"
  | "dcs_ignore"
  | "dcs_passthrough"
  | "osc_string"
  | "sos_pm_apc_string";

/** The outcome of decoding a buffer that starts a UTF-8 character. */
type Utf8 = { kind: "ok"; char: number; len: number } | { kind: "incomplete" } | { kind: "invalid"; len: number };

/** Rust's str::from_utf8 on the first character of `bytes` from `from` on. */
function decodeFirst(bytes: ArrayLike<number>, from = 0): Utf8 {
  const b0 = bytes[from] ?? 0;
  let need: number;
  let lo = 0x80;
  let hi = 0xbf;
  if (b0 < 0x80) {
    return { kind: "ok", char: b0, len: 1 };
  } else if (b0 >= 0xc2 && b0 <= 0xdf) {
    need = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    need = 3;
    if (b0 === 0xe0) lo = 0xa0;
    if (b0 === 0xed) hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    need = 4;
    if (b0 === 0xf0) lo = 0x90;
    if (b0 === 0xf4) hi = 0x8f;
  } else {
    return { kind: "invalid", len: 1 };
  }
  let cp = b0 & (need === 2 ? 0x1f : need === 3 ? 0x0f : 0x07);
  for (let i = 1; i < need; i++) {
    const b = bytes[from + i];
    if (b === undefined) {
      return { kind: "incomplete" };
    }
    if (b < (i === 1 ? lo : 0x80) || b > (i === 1 ? hi : 0xbf)) {
      return { kind: "invalid", len: i };
    }
    cp = (cp << 6) | (b & 0x3f);
  }
  return { kind: "ok", char: cp, len: need };
}

const REPLACEMENT = 0xfffd;

/** Whether a code point is a Rust `char::is_control` (category Cc). */
function isControl(cp: number): boolean {
  return cp <= 0x1f || (cp >= 0x7f && cp <= 0x9f);
}

/** A model of the vte 0.15 parser, fed one byte at a time. */
class Vte {
  state: VteState = "ground";
  partial: number[] = [];
  // CSI/DCS parameters: the count of values (parameters and subparameters),
  // the first group's first value, the value being read.
  paramCount = 0;
  firstParam: number | null = null;
  param = 0;
  intermediates = 0;
  ignoring = false;
  // OSC: the raw bytes and the end index of each parameter.
  oscRaw: number[] = [];
  oscEnds: number[] = [];

  reset(): void {
    this.intermediates = 0;
    this.ignoring = false;
    this.param = 0;
    this.paramCount = 0;
    this.firstParam = null;
  }

  advance(byte: number): Events {
    const ev = noEvents();
    if (this.state === "ground") {
      this.ground(byte, ev);
    } else {
      this.changeState(byte, ev);
    }
    return ev;
  }

  private ground(byte: number, ev: Events): void {
    if (this.partial.length > 0) {
      this.partial.push(byte);
      const d = decodeFirst(this.partial);
      if (d.kind === "ok") {
        ev.printed = d.char;
        this.partial = [];
        return;
      }
      if (d.kind === "incomplete") {
        return;
      }
      // Invalid: the replacement character, then the new byte again from
      // the ground state unless it was part of the invalid sequence.
      ev.printed = REPLACEMENT;
      const consumed = d.len - (this.partial.length - 1);
      this.partial = [];
      if (consumed > 0) {
        return;
      }
    }
    if (byte === ESC) {
      this.state = "escape";
      this.reset();
      return;
    }
    const d = decodeFirst([byte]);
    if (d.kind === "ok") {
      if (byte <= 0x1f) {
        ev.executed = byte;
      } else {
        ev.printed = byte;
      }
    } else if (d.kind === "incomplete") {
      this.partial = [byte];
    } else if (byte <= 0x9f) {
      ev.executed = byte;
    } else {
      ev.printed = REPLACEMENT;
    }
  }

  private execute(byte: number, ev: Events): void {
    ev.executed = byte;
  }

  private anywhere(byte: number, ev: Events): void {
    if (byte === CAN || byte === SUB) {
      this.execute(byte, ev);
      this.state = "ground";
    } else if (byte === ESC) {
      this.reset();
      this.state = "escape";
    }
  }

  private collect(): void {
    if (this.intermediates === MAX_INTERMEDIATES) {
      this.ignoring = true;
    } else {
      this.intermediates += 1;
    }
  }

  private paramNext(byte: number): void {
    if (this.paramCount === MAX_PARAMS) {
      this.ignoring = true;
    } else {
      this.param = Math.min(0xffff, this.param * 10 + (byte - 0x30));
    }
  }

  private pushParam(): void {
    if (this.paramCount === MAX_PARAMS) {
      this.ignoring = true;
    } else {
      if (this.paramCount === 0) {
        this.firstParam = this.param;
      }
      this.paramCount += 1;
      this.param = 0;
    }
  }

  private csiDispatch(byte: number, ev: Events): void {
    if (this.paramCount === MAX_PARAMS) {
      this.ignoring = true;
    } else {
      this.pushParam();
    }
    const titleReport = byte === 0x74 && this.intermediates === 0 && (this.firstParam === 20 || this.firstParam === 21);
    ev.csi = !this.ignoring && !titleReport;
    this.state = "ground";
  }

  private hook(ev: Events): void {
    if (this.paramCount !== MAX_PARAMS) {
      this.pushParam();
    }
    ev.hooked = true;
    this.state = "dcs_passthrough";
  }

  private isC0Executed(byte: number): boolean {
    return byte <= 0x17 || byte === 0x19 || (byte >= 0x1c && byte <= 0x1f);
  }

  private changeState(byte: number, ev: Events): void {
    switch (this.state) {
      case "csi_entry":
        if (this.isC0Executed(byte)) this.execute(byte, ev);
        else if (byte >= 0x20 && byte <= 0x2f) {
          this.collect();
          this.state = "csi_intermediate";
        } else if (byte >= 0x30 && byte <= 0x39) {
          this.paramNext(byte);
          this.state = "csi_param";
        } else if (byte === 0x3a || byte === 0x3b) {
          this.pushParam();
          this.state = "csi_param";
        } else if (byte >= 0x3c && byte <= 0x3f) {
          this.collect();
          this.state = "csi_param";
        } else if (byte >= 0x40 && byte <= 0x7e) this.csiDispatch(byte, ev);
        else this.anywhere(byte, ev);
        return;
      case "csi_ignore":
        if (this.isC0Executed(byte)) this.execute(byte, ev);
        else if (byte >= 0x20 && byte <= 0x3f) {
          // ignored
        } else if (byte >= 0x40 && byte <= 0x7e) this.state = "ground";
        else if (byte === 0x7f) {
          // ignored
        } else this.anywhere(byte, ev);
        return;
      case "csi_intermediate":
        if (this.isC0Executed(byte)) this.execute(byte, ev);
        else if (byte >= 0x20 && byte <= 0x2f) this.collect();
        else if (byte >= 0x30 && byte <= 0x3f) this.state = "csi_ignore";
        else if (byte >= 0x40 && byte <= 0x7e) this.csiDispatch(byte, ev);
        else this.anywhere(byte, ev);
        return;
      case "csi_param":
        if (this.isC0Executed(byte)) this.execute(byte, ev);
        else if (byte >= 0x20 && byte <= 0x2f) {
          this.collect();
          this.state = "csi_intermediate";
        } else if (byte >= 0x30 && byte <= 0x39) this.paramNext(byte);
        else if (byte === 0x3a || byte === 0x3b) this.pushParam();
        else if (byte >= 0x3c && byte <= 0x3f) this.state = "csi_ignore";
        else if (byte >= 0x40 && byte <= 0x7e) this.csiDispatch(byte, ev);
        else if (byte === 0x7f) {
          // ignored
        } else this.anywhere(byte, ev);
        return;
      case "dcs_entry":
      case "dcs_param":
      case "dcs_intermediate":
        this.dcsHead(byte, ev);
        return;
      case "dcs_ignore":
      case "sos_pm_apc_string":
        this.anywhere(byte, ev);
        return;
      case "dcs_passthrough":
        if (byte === CAN || byte === SUB) {
          ev.unhooked = true;
          this.execute(byte, ev);
          this.state = "ground";
        } else if (byte === ESC) {
          ev.unhooked = true;
          this.reset();
          this.state = "escape";
        } else if (byte === 0x9c) {
          ev.unhooked = true;
          this.state = "ground";
        }
        return;
      case "escape":
        this.escape(byte, ev);
        return;
      case "escape_intermediate":
        if (this.isC0Executed(byte)) this.execute(byte, ev);
        else if (byte >= 0x20 && byte <= 0x2f) this.collect();
        else if (byte >= 0x30 && byte <= 0x7e) {
          ev.esc = true;
          this.state = "ground";
        } else if (byte === 0x7f) {
          // ignored
        } else this.anywhere(byte, ev);
        return;
      case "osc_string":
        this.oscString(byte, ev);
        return;
      case "ground":
        return;
    }
  }

  private dcsHead(byte: number, ev: Events): void {
    const state = this.state;
    if (byte <= 0x1f && byte !== CAN && byte !== SUB && byte !== ESC) {
      return;
    }
    if (byte >= 0x20 && byte <= 0x2f) {
      this.collect();
      this.state = "dcs_intermediate";
    } else if (byte >= 0x30 && byte <= 0x3f) {
      if (state === "dcs_intermediate") {
        this.state = "dcs_ignore";
      } else if (byte <= 0x39) {
        this.paramNext(byte);
        this.state = "dcs_param";
      } else if (byte === 0x3a || byte === 0x3b) {
        this.pushParam();
        this.state = "dcs_param";
      } else if (state === "dcs_entry") {
        this.collect();
        this.state = "dcs_param";
      } else {
        this.state = "dcs_ignore";
      }
    } else if (byte >= 0x40 && byte <= 0x7e) {
      this.hook(ev);
    } else if (byte === 0x7f) {
      // ignored
    } else {
      this.anywhere(byte, ev);
    }
  }

  private escape(byte: number, ev: Events): void {
    if (this.isC0Executed(byte)) {
      this.execute(byte, ev);
    } else if (byte >= 0x20 && byte <= 0x2f) {
      this.collect();
      this.state = "escape_intermediate";
    } else if (byte === 0x50) {
      this.reset();
      this.state = "dcs_entry";
    } else if (byte === 0x58 || byte === 0x5e || byte === 0x5f) {
      this.state = "sos_pm_apc_string";
    } else if (byte === 0x5b) {
      this.reset();
      this.state = "csi_entry";
    } else if (byte === 0x5d) {
      this.oscRaw = [];
      this.oscEnds = [];
      this.state = "osc_string";
    } else if (byte >= 0x30 && byte <= 0x7e) {
      ev.esc = true;
      this.state = "ground";
    } else if (byte === CAN || byte === SUB) {
      this.execute(byte, ev);
      this.state = "ground";
    }
    // ESC, DEL and 8-bit bytes: nothing.
  }

  private oscPutParam(): void {
    if (this.oscEnds.length === MAX_OSC_PARAMS) {
      return;
    }
    this.oscEnds.push(this.oscRaw.length);
  }

  private oscEnd(ev: Events): void {
    this.oscPutParam();
    const params: number[][] = [];
    let begin = 0;
    for (const end of this.oscEnds) {
      params.push(this.oscRaw.slice(begin, end));
      begin = end;
    }
    ev.osc = oscVerdict(params);
    this.oscRaw = [];
    this.oscEnds = [];
  }

  private oscString(byte: number, ev: Events): void {
    if (byte === BEL) {
      this.oscEnd(ev);
      this.state = "ground";
    } else if (byte === CAN || byte === SUB) {
      this.oscEnd(ev);
      this.execute(byte, ev);
      this.state = "ground";
    } else if (byte === ESC) {
      this.oscEnd(ev);
      this.reset();
      this.state = "escape";
    } else if (byte <= 0x1f) {
      // other C0: ignored
    } else if (byte === 0x3b) {
      if (this.oscEnds.length === MAX_OSC_PARAMS) {
        return;
      }
      this.oscPutParam();
    } else {
      this.oscRaw.push(byte);
    }
  }
}

const lossy = new TextDecoder("utf-8");

function oscVerdict(params: number[][]): OscVerdict {
  const first = params[0];
  const is = (p: number[] | undefined, text: string) =>
    p !== undefined && p.length === text.length && p.every((b, i) => b === text.charCodeAt(i));
  if (is(first, "52")) {
    return { kind: "drop" };
  }
  if (is(first, "8")) {
    // ESC ] 8 ; params ; URI — the URI may itself hold ';'. A raw ';' starts
    // each later parameter (except past the 16th, where vte drops it).
    const rest = params.slice(2);
    const joined: number[] = [];
    rest.forEach((p, i) => {
      if (i > 0) joined.push(0x3b);
      joined.push(...p);
    });
    let text = "";
    for (const ch of lossy.decode(Uint8Array.from(joined))) {
      const cp = ch.codePointAt(0) ?? 0;
      if (!isControl(cp)) {
        text += ch;
      }
    }
    return text === "" ? { kind: "link_close" } : { kind: "link_open", target: text };
  }
  return { kind: "pass" };
}

/**
 * The length of the longest prefix of `input` that passes as it is and
 * leaves the parser in its ground state (crates/cli's plain_run).
 */
function plainRun(input: Uint8Array, from: number): number {
  let at = from;
  while (at < input.length) {
    const byte = input[at] ?? 0;
    let len: number;
    if ((byte >= 0x20 && byte <= 0x7e) || byte === BEL || byte === 0x08 || byte === 0x09 || byte === 0x0a || byte === 0x0d) {
      len = 1;
    } else if (byte >= 0xc2 && byte <= 0xdf) {
      len = 2;
    } else if (byte >= 0xe0 && byte <= 0xef) {
      len = 3;
    } else if (byte >= 0xf0 && byte <= 0xf4) {
      len = 4;
    } else {
      return at - from;
    }
    if (len > 1) {
      // One whole, valid character, and not a C1 control (U+0080..U+009F).
      const d = decodeFirst(input, at);
      if (d.kind !== "ok" || d.char <= 0x9f) {
        return at - from;
      }
    }
    at += len;
  }
  return at - from;
}

const encoder = new TextEncoder();

/** A growable byte buffer for the output. */
class Out {
  buf = new Uint8Array(4096);
  len = 0;

  private reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
  }

  push(byte: number): void {
    this.reserve(1);
    this.buf[this.len++] = byte;
  }

  append(bytes: ArrayLike<number>): void {
    this.reserve(bytes.length);
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
  }

  appendSlice(bytes: Uint8Array, from: number, to: number): void {
    this.reserve(to - from);
    this.buf.set(bytes.subarray(from, to), this.len);
    this.len += to - from;
  }

  take(): Uint8Array {
    const out = this.buf.slice(0, this.len);
    this.len = 0;
    return out;
  }
}

/** The filter of one session's output; keeps state across data frames. */
export class OutputFilter {
  #vte = new Vte();
  #framing: Framing = { kind: "ground" };
  /** The raw bytes of the sequence being framed. */
  #pending: number[] = [];
  /** A string sequence that passed and ended with the ESC of the next one. */
  #held: number[] = [];
  /** The bytes of an unfinished UTF-8 character in the ground state. */
  #utf8: number[] = [];
  #overflow = false;
  #dcsPass = false;
  #link: string | null = null;
  #swallowSt = false;
  #out = new Out();

  /**
   * Filters `input`; returns what may reach the terminal. Input that passes
   * whole comes back as it is (the same bytes, not a copy): the common case
   * of a burst of output costs no copy here.
   */
  filter(input: Uint8Array): Uint8Array {
    if (this.#atRest() && plainRun(input, 0) === input.length) {
      if (input.length > 0) this.#swallowSt = false;
      return input;
    }
    let at = 0;
    while (at < input.length) {
      if (this.#atRest()) {
        const run = plainRun(input, at);
        if (run > 0) {
          this.#out.appendSlice(input, at, at + run);
          this.#swallowSt = false;
          at += run;
          continue;
        }
      }
      this.#byte(input[at] ?? 0);
      at += 1;
    }
    return this.#out.take();
  }

  /** The byte-by-byte path alone (for the differential test). */
  filterBytewise(input: Uint8Array): Uint8Array {
    for (const byte of input) {
      this.#byte(byte);
    }
    return this.#out.take();
  }

  /** What the end of the session leaves: a held string's ST, an open link's target. */
  finish(): Uint8Array {
    this.#releaseHeld(false);
    if (this.#link !== null) {
      this.#out.append(encoder.encode(` [${this.#link}]`));
      this.#link = null;
    }
    return this.#out.take();
  }

  #atRest(): boolean {
    return this.#framing.kind === "ground" && this.#utf8.length === 0 && this.#pending.length === 0 && this.#held.length === 0;
  }

  #byte(byte: number): void {
    const framing = this.#framing;
    switch (framing.kind) {
      case "ground":
        this.#ground(byte);
        break;
      case "esc":
        this.#esc(byte, framing.intermediate);
        break;
      case "csi":
        this.#csi(byte);
        break;
      case "osc":
        this.#osc(byte);
        break;
      case "dcs":
      case "str":
        this.#string(byte);
        break;
    }
    if (this.#framing.kind === "ground") {
      const kept = this.#pending.length > 0;
      this.#releaseHeld(kept);
      this.#out.append(this.#pending);
      this.#pending = [];
    }
  }

  #releaseHeld(terminated: boolean): void {
    if (this.#held.length === 0) {
      return;
    }
    this.#out.append(this.#held);
    this.#held = [];
    if (!terminated) {
      this.#out.push(ESC);
      this.#out.push(0x5c);
    }
  }

  #startEscape(): void {
    this.#pending = [ESC];
    this.#framing = { kind: "esc", intermediate: false };
    this.#overflow = false;
  }

  #end(keep: boolean): void {
    if (!keep) {
      this.#pending = [];
    }
    this.#framing = { kind: "ground" };
  }

  #ground(byte: number): void {
    const events = this.#vte.advance(byte);
    if (byte === ESC) {
      this.#out.append(this.#utf8);
      this.#utf8 = [];
      this.#swallowSt = false;
      this.#startEscape();
      return;
    }
    this.#utf8.push(byte);
    const c1 =
      (events.printed !== null && events.printed >= 0x80 && events.printed <= 0x9f) ||
      (events.executed !== null && events.executed >= 0x80);
    if (events.printed !== null || events.executed !== null) {
      this.#swallowSt = false;
      if (!c1) {
        this.#out.append(this.#utf8);
      }
      this.#utf8 = [];
    } else if (this.#utf8.length >= 4) {
      this.#out.append(this.#utf8);
      this.#utf8 = [];
    }
  }

  #esc(byte: number, intermediate: boolean): void {
    const events = this.#vte.advance(byte);
    if (byte === ESC) {
      this.#startEscape();
    } else if (byte === CAN || byte === SUB) {
      this.#end(false);
    } else if (byte <= 0x1f) {
      this.#pending.push(byte);
    } else if (byte <= 0x2f) {
      this.#pending.push(byte);
      this.#framing = { kind: "esc", intermediate: true };
    } else if (byte === 0x5b && !intermediate) {
      this.#pending.push(byte);
      this.#framing = { kind: "csi" };
    } else if (byte === 0x5d && !intermediate) {
      this.#pending.push(byte);
      this.#framing = { kind: "osc" };
    } else if (byte === 0x50 && !intermediate) {
      this.#pending.push(byte);
      this.#dcsPass = false;
      this.#framing = { kind: "dcs" };
    } else if ((byte === 0x58 || byte === 0x5e || byte === 0x5f) && !intermediate) {
      this.#pending.push(byte);
      this.#framing = { kind: "str" };
    } else if (byte >= 0x30 && byte <= 0x7e) {
      this.#pending.push(byte);
      const loneSt = this.#pending.length === 2 && this.#pending[0] === ESC && this.#pending[1] === 0x5c;
      const swallow = this.#swallowSt && loneSt && events.esc;
      this.#swallowSt = false;
      this.#end(!swallow);
    }
    // DEL and 8-bit bytes inside an escape: ignored by the parser, dropped.
  }

  #csi(byte: number): void {
    const events = this.#vte.advance(byte);
    if (byte === ESC) {
      this.#startEscape();
    } else if (byte === CAN || byte === SUB) {
      this.#end(false);
    } else if (byte >= 0x40 && byte <= 0x7e) {
      this.#pending.push(byte);
      this.#end(events.csi === true);
    } else if (byte >= 0x80) {
      // ignored
    } else {
      this.#pending.push(byte);
    }
  }

  #holdStringByte(byte: number): void {
    this.#pending.push(byte);
    if (this.#pending.length > MAX_STRING) {
      this.#overflow = true;
      this.#pending = [];
    }
  }

  #osc(byte: number): void {
    const terminator = byte === BEL || byte === ESC || byte === CAN || byte === SUB;
    if (this.#overflow && !terminator) {
      return;
    }
    const events = this.#vte.advance(byte);
    if (!terminator) {
      this.#holdStringByte(byte);
      return;
    }
    const verdict: OscVerdict = this.#overflow ? { kind: "drop" } : (events.osc ?? { kind: "drop" });
    if (byte !== ESC) {
      this.#pending.push(byte);
    }
    const keep = verdict.kind === "pass";
    this.#releaseHeld(keep);
    if (verdict.kind === "link_open") {
      const previous = this.#link;
      this.#link = verdict.target;
      if (previous !== null) {
        this.#out.append(encoder.encode(` [${previous}]`));
      }
    } else if (verdict.kind === "link_close") {
      if (this.#link !== null) {
        this.#out.append(encoder.encode(` [${this.#link}]`));
        this.#link = null;
      }
    }
    this.#end(keep);
    if (byte === ESC) {
      this.#held = this.#pending;
      this.#pending = [];
      this.#startEscape();
      this.#swallowSt = !keep;
    }
  }

  #string(byte: number): void {
    const terminator = byte === ESC || byte === CAN || byte === SUB || byte === 0x9c;
    if (this.#overflow && !terminator) {
      return;
    }
    const events = this.#vte.advance(byte);
    if (events.hooked !== null) {
      this.#dcsPass = events.hooked;
    }
    const ended = byte === ESC || byte === CAN || byte === SUB ? true : byte === 0x9c ? events.unhooked : false;
    if (!ended) {
      this.#holdStringByte(byte);
      return;
    }
    const keep =
      !this.#overflow && (this.#framing.kind === "dcs" ? this.#dcsPass : true) && byte !== CAN && byte !== SUB;
    if (byte === 0x9c) {
      this.#releaseHeld(false);
      this.#end(false);
      return;
    }
    this.#releaseHeld(keep);
    this.#end(keep);
    if (byte === ESC) {
      this.#held = this.#pending;
      this.#pending = [];
      this.#startEscape();
      this.#swallowSt = !keep;
    }
  }
}
