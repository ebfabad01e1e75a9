//! The check order of message 1 on the host (5.3, M2-45 steps 0–13,
//! D-M2-45-5/-6): for every message 1 on a data connection the steps run in
//! this order, the first failure wins and nothing after it runs. The refusal is
//! a `close_detail` whose close code is 4101 (token_expired, token_replayed) or
//! 4104 (every other detail): [`CloseDetail::handshake_close_code`].
//!
//! Step 6 records the `jti` before the later steps run, so a replay of a token
//! that failed later is still `token_replayed`; step 11 writes `bindings.json`
//! before step 12, and the binding stays when a later step fails (T12).

use bothy_noise::{Message1, Responder, Transport};
use bothy_proto::codes::CloseDetail;
use bothy_proto::jwk::Jwks;
use bothy_proto::jws::{Att, TerminalSessionClaims, decode_terminal_session};
use bothy_proto::report::ProfileKind;
use uuid::Uuid;

/// What the data connection knows when message 1 arrives.
#[derive(Debug, Clone, Copy)]
pub struct CheckContext<'a> {
    /// This host's ID (prologue, `aud`).
    pub host_id: Uuid,
    /// The session of the `session.open` that opened this connection (prologue, `sid`).
    pub session_id: Uuid,
    /// The keys of purpose terminal from the hello of this data connection.
    pub jwks: &'a Jwks,
    /// `clock_leeway_ms` of that hello.
    pub leeway_ms: u64,
    /// Now, Unix milliseconds.
    pub now_ms: i64,
    /// HD5, or the server of the control connection is this machine (2.3).
    pub is_server_host: bool,
}

/// A live PTY of the session named by the token (step 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePty {
    /// The person it runs for.
    pub sub: Uuid,
    /// Its session user.
    pub osu: String,
    /// Its profile.
    pub prf: String,
}

/// The state the later steps read and write.
pub trait CheckState {
    /// Step 6: records `jti` until `until_ms`; `false` when it was seen before.
    fn remember_jti(&mut self, jti: Uuid, until_ms: i64) -> bool;
    /// Step 8: the live PTY of `session_id`, if any.
    fn live_pty(&self, session_id: Uuid) -> Option<LivePty>;
    /// Step 9: the kind of the profile `name` if the host offers it now.
    fn offered_profile(&self, name: &str) -> Option<ProfileKind>;
    /// Step 10: whether `osu` is in `host_service.session_users`.
    fn is_session_user(&self, osu: &str) -> bool;
    /// Step 11: binds `osu` to `sub` if unbound (written before it returns);
    /// `Ok(false)` when it is bound to another person.
    fn bind(&mut self, osu: &str, sub: Uuid) -> Result<bool, BindFailed>;
    /// Step 12: the number of working directories of `osu` after HD7, as reported.
    fn workdir_count(&self, osu: &str) -> usize;
}

/// `bindings.json` could not be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindFailed;

/// A message 1 that passed every step.
#[derive(Debug)]
pub struct Accepted {
    /// The verified claims.
    pub claims: TerminalSessionClaims,
    /// The responder, ready for message 2.
    pub responder: Responder,
}

/// Runs steps 0–13 on `message` with `responder` (built with the prologue of
/// this session and this host and the host's static key).
pub fn check_message1<S: CheckState>(
    mut responder: Responder,
    message: &[u8],
    ctx: &CheckContext<'_>,
    state: &mut S,
) -> Result<Accepted, CloseDetail> {
    // Step 0: the handshake with the prologue and the static key.
    let Message1 {
        payload,
        initiator_ephemeral,
    } = responder
        .read_message1(message)
        .map_err(|_| CloseDetail::HandshakeFailed)?;
    // Steps 1 and 2: compact JWS, header, key from the JWKS of this connection's
    // hello, signature, claims with their types; typ.
    let token = std::str::from_utf8(&payload).map_err(|_| CloseDetail::TokenInvalid)?;
    let claims = decode_terminal_session(token, ctx.jwks).map_err(|_| CloseDetail::TokenInvalid)?;
    // Step 3: aud.
    if claims.aud != ctx.host_id {
        return Err(CloseDetail::TokenInvalid);
    }
    // Step 4: sid = the session of the prologue.
    if claims.sid != ctx.session_id {
        return Err(CloseDetail::TokenInvalid);
    }
    // Step 5: exp with the leeway of hello.
    if claims.is_expired_ms(ctx.now_ms, ctx.leeway_ms) {
        return Err(CloseDetail::TokenExpired);
    }
    // Step 6: jti never seen; remembered now until exp plus the leeway.
    let until_ms = claims
        .exp
        .saturating_mul(1000)
        .saturating_add(i64::try_from(ctx.leeway_ms).unwrap_or(i64::MAX));
    if !state.remember_jti(claims.jti, until_ms) {
        return Err(CloseDetail::TokenReplayed);
    }
    // Step 7: cek = SHA-256 of the e of message 1.
    if !claims.cek_matches(&initiator_ephemeral) {
        return Err(CloseDetail::TokenInvalid);
    }
    // Step 8: open needs no live PTY; attach needs one of the same sub, osu, prf.
    let live = state.live_pty(claims.sid);
    match (claims.att, live) {
        (Att::Open, None) => {}
        (Att::Attach, Some(live))
            if live.sub == claims.sub && live.osu == claims.osu && live.prf == claims.prf => {}
        _ => return Err(CloseDetail::TokenInvalid),
    }
    // Step 9: a profile the host offers now.
    let Some(kind) = state.offered_profile(&claims.prf) else {
        return Err(CloseDetail::ProfileUnknown);
    };
    // Step 10: osu in host_service.session_users.
    if !state.is_session_user(&claims.osu) {
        return Err(CloseDetail::SessionUserUnknown);
    }
    // Step 11: osu unbound (bound to sub now) or bound to sub.
    match state.bind(&claims.osu, claims.sub) {
        Ok(true) => {}
        Ok(false) | Err(BindFailed) => return Err(CloseDetail::SessionUserMismatch),
    }
    // Step 12: wdi exactly for claude with att = open, an index into osu's list.
    let wdi_expected = kind == ProfileKind::Claude && claims.att == Att::Open;
    match (wdi_expected, claims.wdi) {
        (false, None) => {}
        (true, Some(index)) if (index as usize) < state.workdir_count(&claims.osu) => {}
        _ => return Err(CloseDetail::ProfileUnknown),
    }
    // Step 13: on the server host only own = true.
    if ctx.is_server_host && !claims.own {
        return Err(CloseDetail::ServerHostOwnerOnly);
    }
    Ok(Accepted { claims, responder })
}

/// The payload of message 2 (6.1 step 7): `{"v":1,"host_version":…,"profile":…}`.
pub fn message2_payload(profile: &str) -> Vec<u8> {
    serde_json::json!({"v": 1, "host_version": crate::HOST_VERSION, "profile": profile})
        .to_string()
        .into_bytes()
}

/// Writes message 2; the transport of the session follows.
pub fn write_message2(accepted: &mut Accepted) -> Result<(Vec<u8>, Transport), CloseDetail> {
    let payload = message2_payload(&accepted.claims.prf);
    accepted
        .responder
        .write_message2(&payload)
        .map_err(|_| CloseDetail::HandshakeFailed)
}

#[cfg(test)]
mod tests;
