// WebAuthn between the server (webauthn-rs JSON, base64url fields) and the
// browser (ArrayBuffers). userVerification is required for every assertion
// (the console's step-up is passkey-only, DESIGN 3.1).
import { fromBase64, toBase64Url } from "./bytes.js";
import { ApiError, asObject } from "./api/client.js";

function buffer(value: unknown, what: string): ArrayBuffer {
  if (typeof value !== "string") {
    throw new ApiError(0, "malformed_answer", `The passkey options lack ${what}.`, undefined);
  }
  const bytes = fromBase64(value);
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
}

function b64(data: ArrayBuffer | null): string | undefined {
  return data === null ? undefined : toBase64Url(new Uint8Array(data));
}

function descriptors(list: unknown): PublicKeyCredentialDescriptor[] | undefined {
  if (!Array.isArray(list)) return undefined;
  return list.map((item) => {
    const entry = asObject(item, "credential descriptor");
    const descriptor: PublicKeyCredentialDescriptor = { type: "public-key", id: buffer(entry.id, "a credential ID") };
    if (Array.isArray(entry.transports)) {
      descriptor.transports = entry.transports as AuthenticatorTransport[];
    }
    return descriptor;
  });
}

/** Registers a passkey with the server's creation options; the credential as webauthn-rs reads it. */
export async function createPasskey(options: unknown): Promise<Record<string, unknown>> {
  const publicKey = asObject(asObject(options, "passkey options").publicKey, "passkey options");
  const user = asObject(publicKey.user, "passkey user");
  const rp = asObject(publicKey.rp, "passkey relying party");
  const exclude = descriptors(publicKey.excludeCredentials);
  const creation: PublicKeyCredentialCreationOptions = {
    challenge: buffer(publicKey.challenge, "the challenge"),
    rp: { name: String(rp.name ?? "bothy"), ...(typeof rp.id === "string" ? { id: rp.id } : {}) },
    user: { id: buffer(user.id, "the user ID"), name: String(user.name ?? ""), displayName: String(user.displayName ?? user.name ?? "") },
    pubKeyCredParams: (Array.isArray(publicKey.pubKeyCredParams) ? publicKey.pubKeyCredParams : []) as PublicKeyCredentialParameters[],
    ...(typeof publicKey.timeout === "number" ? { timeout: publicKey.timeout } : {}),
    ...(typeof publicKey.attestation === "string" ? { attestation: publicKey.attestation as AttestationConveyancePreference } : {}),
    ...(exclude ? { excludeCredentials: exclude } : {}),
    authenticatorSelection: {
      ...(publicKey.authenticatorSelection !== undefined ? (asObject(publicKey.authenticatorSelection, "authenticator selection") as AuthenticatorSelectionCriteria) : {}),
      userVerification: "required",
    },
  };
  const credential = (await navigator.credentials.create({ publicKey: creation })) as PublicKeyCredential | null;
  if (credential === null) {
    throw new DOMException("no passkey was made", "NotAllowedError");
  }
  const response = credential.response as AuthenticatorAttestationResponse;
  const out: Record<string, unknown> = {
    id: credential.id,
    rawId: b64(credential.rawId),
    type: credential.type,
    extensions: {},
    response: {
      attestationObject: b64(response.attestationObject),
      clientDataJSON: b64(response.clientDataJSON),
      ...(typeof response.getTransports === "function" ? { transports: response.getTransports() } : {}),
    },
  };
  return out;
}

/** An assertion with userVerification required; the credential as webauthn-rs reads it. */
export async function assertPasskey(options: unknown): Promise<Record<string, unknown>> {
  const publicKey = asObject(asObject(options, "passkey options").publicKey, "passkey options");
  const allow = descriptors(publicKey.allowCredentials);
  const request: PublicKeyCredentialRequestOptions = {
    challenge: buffer(publicKey.challenge, "the challenge"),
    userVerification: "required",
    ...(typeof publicKey.rpId === "string" ? { rpId: publicKey.rpId } : {}),
    ...(typeof publicKey.timeout === "number" ? { timeout: publicKey.timeout } : {}),
    ...(allow ? { allowCredentials: allow } : {}),
  };
  const credential = (await navigator.credentials.get({ publicKey: request })) as PublicKeyCredential | null;
  if (credential === null) {
    throw new DOMException("no passkey answered", "NotAllowedError");
  }
  const response = credential.response as AuthenticatorAssertionResponse;
  const inner: Record<string, unknown> = {
    authenticatorData: b64(response.authenticatorData),
    clientDataJSON: b64(response.clientDataJSON),
    signature: b64(response.signature),
  };
  const handle = b64(response.userHandle);
  if (handle !== undefined) {
    inner.userHandle = handle;
  }
  return { id: credential.id, rawId: b64(credential.rawId), type: credential.type, extensions: {}, response: inner };
}

export function passkeysSupported(): boolean {
  return typeof window.PublicKeyCredential === "function" && typeof navigator.credentials?.get === "function";
}
