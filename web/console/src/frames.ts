// The frames inside the Noise transport messages (spec 24, 5.4): a type byte
// and its content, big-endian. The console's twin of bothy-proto's frame.rs:
// it refuses what that refuses (every refusal ends the session with 4104).

export const MAX_FRAME_LEN = 65519;
export const MAX_DATA_LEN = MAX_FRAME_LEN - 1;

export type HostFrame =
  | { type: "data"; bytes: Uint8Array }
  | { type: "exit"; code: number }
  | { type: "replay_begin" }
  | { type: "replay_end" };

export class FrameError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FrameError";
  }
}

function size(type: number, columns: number, rows: number): Uint8Array {
  if (!Number.isInteger(columns) || !Number.isInteger(rows) || columns < 1 || rows < 1 || columns > 0xffff || rows > 0xffff) {
    throw new FrameError("terminal size out of range");
  }
  const out = new Uint8Array(5);
  out[0] = type;
  new DataView(out.buffer).setUint16(1, columns);
  new DataView(out.buffer).setUint16(3, rows);
  return out;
}

export const encodeStart = (columns: number, rows: number) => size(0x01, columns, rows);
export const encodeResize = (columns: number, rows: number) => size(0x03, columns, rows);
export const encodeClose = () => Uint8Array.of(0x04);

export function encodeData(bytes: Uint8Array): Uint8Array {
  if (bytes.length === 0 || bytes.length > MAX_DATA_LEN) {
    throw new FrameError("data frame of the wrong length");
  }
  const out = new Uint8Array(bytes.length + 1);
  out[0] = 0x02;
  out.set(bytes, 1);
  return out;
}

/** A frame from the host; anything the host may not send is refused. */
export function decodeHostFrame(plain: Uint8Array): HostFrame {
  if (plain.length === 0) throw new FrameError("empty frame");
  if (plain.length > MAX_FRAME_LEN) throw new FrameError("frame too long");
  const type = plain[0];
  const content = plain.subarray(1);
  switch (type) {
    case 0x02:
      if (content.length === 0) throw new FrameError("empty data frame");
      return { type: "data", bytes: content };
    case 0x05:
      if (content.length !== 4) throw new FrameError("exit frame of the wrong length");
      return { type: "exit", code: new DataView(content.buffer, content.byteOffset, 4).getInt32(0) };
    case 0x06:
    case 0x07:
      if (content.length !== 0) throw new FrameError("replay frame with content");
      return { type: type === 0x06 ? "replay_begin" : "replay_end" };
    case 0x01:
    case 0x03:
    case 0x04:
      throw new FrameError("a frame the host may not send");
    default:
      throw new FrameError("unknown frame type");
  }
}
