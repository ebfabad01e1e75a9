//! `GET /api/v1/events` (WebSocket): the event stream of a person (spec 24
//! section 10.2; DESIGN 3.3 "Clients follow events on `GET /api/v1/events`
//! (WebSocket), resuming from a position").
//!
//! # The upgrade
//! - `Authorization: Bearer <access_token>` (the CLI), checked by the
//!   [`Principal`] extractor before anything else: no or no valid token is `401
//!   unauthenticated` and no upgrade. Persons only: an agent or app gets `403
//!   forbidden` (`subject_kind_not_allowed`), audited as an `events.read` denial.
//!   The console's cookie is not accepted here yet (the console work adds it,
//!   together with an `Origin` check, because a cookie travels with cross-site
//!   WebSocket upgrades).
//! - `?after=<position>`: an integer ≥ 0 and at most the current end of the log;
//!   without it the stream starts at the current end (only new events). Anything
//!   else is `400 validation_failed` with the pointer `/query/after`.
//! - A request that is not a WebSocket upgrade is `400 validation_failed`
//!   (`/headers/upgrade`, `websocket_upgrade_required`).
//!
//! # Messages (server to client, text frames)
//! - first `{"op":"ready","d":{"position":<start>}}`;
//! - a durable event: `{"op":"event","d":{"position","kind","at","payload"}}`;
//! - an ephemeral event: `{"op":"event","d":{"kind","at","payload"}}` (no
//!   position: it is never replayed; `at` is when this server delivered it).
//!
//! Durable events come in position order without gaps or duplicates
//! ([`crate::events::Subscription`]); a client that reconnects with `after=` its
//! last position loses nothing.
//!
//! # Who sees what
//! Each delivery is checked when it arrives, against the principal's state read
//! again then (the same [`principal::authenticate`] every request uses):
//! [`Audience::Person`] only that person, [`Audience::Owners`] active owners,
//! [`Audience::HostReaders`] whoever [`may_read_host`] (the one host.read of
//! [`crate::permissions::authorize`]). A login session that
//! ended (logout, revocation, expiry, device revoked, person disabled) closes the
//! socket with 4012 `credential_revoked` at the next delivery that might have
//! reached it; events addressed to someone else never cause a read.
//!
//! # Closing
//! | Code | When |
//! |---|---|
//! | 4002 `invalid_message` | the client sent a text or binary frame (this stream takes none), a frame over `sync.ws_max_frame_bytes`, or a broken frame |
//! | 4012 `credential_revoked` | see above |
//! | 4013 `server_shutdown` | the server shuts down ([`crate::shutdown`]) |
//! | 4014 `slow_consumer` | the outbound queue (`sync.outbound_queue_max` messages) is full, or one write took longer than `gateway.write_timeout` |
//! | 4000 `unknown_error` | the database failed while reading events or the principal |
//!
//! Pings and pongs from the client are ignored (tungstenite answers pings). The
//! close frame may take up to `gateway.write_timeout` to write; then the server
//! waits up to [`CLOSE_ANSWER_WAIT`] for the client's close frame and drops the
//! connection (RFC 6455 7.1.1: the server closes TCP first).

use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use bothy_proto::codes::CloseCode;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use zeroize::Zeroizing;

use super::query::{QueryParams, invalid};
use crate::audit::AuditAction;
use crate::events::{self, Audience, Delivery, EventPosition, EventsError};
use crate::http::api_doc::{Internal, Problem, Unauthenticated, Unavailable};
use crate::http::problem::PROBLEM_JSON;
use crate::http::{ApiError, ProblemCode};
use crate::identity::principal::{self, PersonPrincipal, Principal};
use crate::identity::{AuthFailure, IdentityError};
use crate::metrics::Metrics;
use crate::permissions::authorize::may_read_host;
use crate::shutdown::{CLOSE_ANSWER_WAIT, ShutdownGuard};
use crate::state::AppState;

/// The routes of this file.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(subscribe))
}

/// The event stream of the caller (WebSocket; persons, `Bearer` only).
///
/// Server-to-client text frames: first `{"op":"ready","d":{"position"}}`, then
/// `{"op":"event","d":{"position","kind","at","payload"}}` for durable events
/// (in position order, without gaps) and `{"op":"event","d":{"kind","at","payload"}}`
/// for ephemeral ones. The client sends no data frames. Close codes: 4002
/// `invalid_message`, 4012 `credential_revoked`, 4013 `server_shutdown`, 4014
/// `slow_consumer`, 4000 `unknown_error`.
#[utoipa::path(
    get,
    path = "/api/v1/events",
    operation_id = "subscribeEvents",
    tag = "events",
    params(
        ("after" = Option<i64>, Query, minimum = 0, description = "Resume after this \
            position (at most the log's current end); without it the stream starts at the \
            current end (only new events)."),
    ),
    security(("bearer" = [])),
    responses(
        (status = 101, description = "Switching Protocols: the WebSocket is open."),
        (status = 400, description = "`validation_failed`: `/query/after` `invalid` or \
            `out_of_range` (beyond the log's end), `/query/<name>` `unknown_parameter` or \
            `duplicate_parameter`, or `/headers/upgrade` `websocket_upgrade_required` (not a \
            WebSocket upgrade).", body = Problem, content_type = PROBLEM_JSON),
        Unauthenticated,
        (status = 403, description = "`forbidden` reason `subject_kind_not_allowed`: an agent \
            or app (audited as `events.read`).", body = Problem, content_type = PROBLEM_JSON),
        Internal,
        Unavailable,
    )
)]
async fn subscribe(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    uri: Uri,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let now = state.clock().now_ms();
    let person = principal
        .require_person(state.db(), now, AuditAction::EventsRead)
        .await?
        .clone();
    // The principal came from this bearer token (the extractor takes it
    // first); the socket keeps it to read the principal again per delivery.
    let token =
        bearer_token(&headers).ok_or(IdentityError::Unauthenticated(AuthFailure::TokenInvalid))?;

    let query = QueryParams::parse(&uri, &["after"])?;
    let end = events::last_position(state.db())
        .await
        .map_err(|error| ApiError::from(IdentityError::Db(error)))?;
    let start = match query.integer("after", 0, i64::MAX)? {
        // A position this log never handed out (a client of another
        // deployment, or of a restored backup): following from there would
        // silently skip events.
        Some(after) if after > end => return Err(invalid("after", "out_of_range")),
        Some(after) => after,
        None => end,
    };
    let upgrade = upgrade.map_err(|_| {
        ApiError::new(ProblemCode::ValidationFailed)
            .with_error("/headers/upgrade", "websocket_upgrade_required")
    })?;

    // Tracked from before the `101`, so a shutdown that begins while the
    // upgrade completes still waits for this socket (and closes it with 4013).
    let guard = state.shutdown().track();
    let max_frame = state.config().sync.ws_max_frame_bytes;
    let socket = EventSocket {
        state,
        person,
        token,
        start,
        guard,
    };
    Ok(upgrade
        .max_frame_size(max_frame)
        .max_message_size(max_frame)
        .on_upgrade(move |websocket| socket.run(websocket)))
}

/// The token of `Authorization: Bearer <token>`, read the same way as the
/// [`Principal`] extractor reads it.
fn bearer_token(headers: &HeaderMap) -> Option<Zeroizing<String>> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| Zeroizing::new(token.trim().to_owned()))
}

/// One event stream socket: who it belongs to and where it starts.
struct EventSocket {
    state: AppState,
    /// The principal at the upgrade; re-read per delivery.
    person: PersonPrincipal,
    /// The bearer token of the upgrade (wiped on drop, never logged).
    token: Zeroizing<String>,
    start: EventPosition,
    guard: ShutdownGuard,
}

/// How the socket's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The server closes with this code.
    Close(CloseCode),
    /// The client sent its close frame: tungstenite has queued the answer.
    ClosedByClient,
    /// The connection broke: nothing more to send.
    Gone,
}

/// How the writer ended.
enum WriterEnd {
    /// One write did not finish within `gateway.write_timeout`.
    Stalled,
    /// The connection broke.
    Broken,
}

/// A message in the outbound queue.
struct Outbound {
    message: Message,
    /// An event (counted in `bothy_events_delivered_total`), not `ready`.
    is_event: bool,
}

#[derive(Serialize)]
struct Frame<D> {
    op: &'static str,
    d: D,
}

#[derive(Serialize)]
struct Ready {
    position: EventPosition,
}

#[derive(Serialize)]
struct DurableData<'a> {
    position: EventPosition,
    kind: &'static str,
    at: i64,
    payload: &'a Map<String, Value>,
}

#[derive(Serialize)]
struct EphemeralData<'a> {
    kind: &'static str,
    at: i64,
    payload: &'a Map<String, Value>,
}

fn text<D: Serialize>(op: &'static str, d: D) -> Result<Message, serde_json::Error> {
    Ok(Message::text(serde_json::to_string(&Frame { op, d })?))
}

/// Counts the socket in `bothy_events_sockets` while it is subscribed.
struct Subscribed<'a>(&'a Metrics);

impl<'a> Subscribed<'a> {
    fn new(metrics: &'a Metrics) -> Self {
        metrics.events_sockets().inc();
        Subscribed(metrics)
    }
}

impl Drop for Subscribed<'_> {
    fn drop(&mut self) {
        self.0.events_sockets().dec();
    }
}

impl EventSocket {
    async fn run(mut self, websocket: WebSocket) {
        let state = self.state.clone();
        let metrics = state.metrics();
        let write_timeout = state.config().gateway.write_timeout;
        let subscribed = Subscribed::new(metrics);
        let mut subscription = state.events().subscribe_from(self.start);
        let (mut sink, mut stream) = websocket.split();

        // Bounded: a client that does not keep up must not make the server
        // hold an ever longer list of messages for it. The events themselves
        // stay in the log, so closing it (4014) loses nothing: it resumes
        // with `after=`. Capacity is at least 1 (config), so `ready` fits.
        let (queue, mut outbound) =
            mpsc::channel::<Outbound>(state.config().sync.outbound_queue_max);
        let ready = match text(
            "ready",
            Ready {
                position: self.start,
            },
        ) {
            Ok(message) => message,
            Err(_) => return,
        };
        if queue
            .try_send(Outbound {
                message: ready,
                is_event: false,
            })
            .is_err()
        {
            return;
        }

        let end = {
            // The writer borrows the sink; dropping it (when the loop ends)
            // gives the sink back for the close frame. A write cut off there
            // leaves no partial frame: tungstenite buffers whole frames.
            let writer = write_queue(
                &mut sink,
                &mut outbound,
                write_timeout,
                metrics.events_delivered(),
            );
            tokio::pin!(writer);
            loop {
                tokio::select! {
                    biased;
                    () = self.guard.triggered() => break End::Close(CloseCode::ServerShutdown),
                    ended = &mut writer => break match ended {
                        WriterEnd::Stalled => End::Close(CloseCode::SlowConsumer),
                        WriterEnd::Broken => End::Gone,
                    },
                    frame = stream.next() => match frame {
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                        Some(Ok(Message::Close(_))) => break End::ClosedByClient,
                        None => break End::Gone,
                        // This stream takes no data, and a frame over the
                        // limit or a broken one fails to decode: 4002 either way.
                        Some(Ok(Message::Text(_) | Message::Binary(_))) | Some(Err(_)) => {
                            break End::Close(CloseCode::InvalidMessage);
                        }
                    },
                    delivery = subscription.recv() => {
                        match self.message_for(delivery).await {
                            Ok(None) => {}
                            Ok(Some(message)) => {
                                match queue.try_send(Outbound { message, is_event: true }) {
                                    Ok(()) => {}
                                    Err(TrySendError::Full(_)) => {
                                        break End::Close(CloseCode::SlowConsumer);
                                    }
                                    // The writer holds the receiver until it ends.
                                    Err(TrySendError::Closed(_)) => break End::Gone,
                                }
                            }
                            Err(code) => break End::Close(code),
                        }
                    }
                }
            }
        };
        // Counted before the socket leaves the gauge, so whoever sees the gauge
        // drop also sees why.
        if end == End::Close(CloseCode::SlowConsumer) {
            metrics.events_dropped_slow().inc();
        }
        // From here the socket no longer subscribes: it only says goodbye.
        drop(subscription);
        drop(subscribed);
        match end {
            End::Close(code) => close(&mut sink, &mut stream, code, write_timeout).await,
            // Reading on flushes tungstenite's answering close frame and then
            // ends the stream.
            End::ClosedByClient => read_to_end(&mut stream, CLOSE_ANSWER_WAIT).await,
            End::Gone => {}
        }
        // `self.guard` drops last: the server's drain waits for the goodbye.
        drop(self);
    }

    /// The message for a delivery, `None` if this person may not see it, or
    /// the close code that ends the socket.
    async fn message_for(
        &self,
        delivery: Result<Delivery, EventsError>,
    ) -> Result<Option<Message>, CloseCode> {
        let delivery = match delivery {
            Ok(delivery) => delivery,
            // The tail stops only when the server shuts down.
            Err(EventsError::TailStopped) => return Err(CloseCode::ServerShutdown),
            Err(EventsError::Db(error)) => {
                tracing::warn!(%error, "the events stream cannot read the event log");
                return Err(CloseCode::UnknownError);
            }
        };
        let audience = match &delivery {
            Delivery::Durable(event) => event.audience,
            Delivery::Ephemeral(event) => event.audience,
        };
        if !self.may_see(audience).await? {
            return Ok(None);
        }
        let message = match &delivery {
            Delivery::Durable(event) => text(
                "event",
                DurableData {
                    position: event.position,
                    kind: event.kind.as_str(),
                    at: event.at,
                    payload: &event.payload,
                },
            ),
            Delivery::Ephemeral(event) => text(
                "event",
                EphemeralData {
                    kind: event.kind.as_str(),
                    at: self.state.clock().now_ms(),
                    payload: &event.payload,
                },
            ),
        };
        message.map(Some).map_err(|error| {
            tracing::warn!(%error, "an event does not encode");
            CloseCode::UnknownError
        })
    }

    /// Whether the person may see an event for `audience`, with their state
    /// as it is now; 4012 if their login session no longer authenticates.
    async fn may_see(&self, audience: Audience) -> Result<bool, CloseCode> {
        // Someone else's personal event: no state of ours can change that.
        if let Audience::Person(id) = audience {
            if id != self.person.person_id {
                return Ok(false);
            }
        }
        let state = &self.state;
        let now = state.clock().now_ms();
        let fresh =
            match principal::authenticate(state.db(), state.pepper(), &self.token, now).await {
                Ok(Some(Principal::Person(fresh)))
                    if fresh.login_session_id == self.person.login_session_id =>
                {
                    fresh
                }
                Ok(_) => return Err(CloseCode::CredentialRevoked),
                Err(error) => {
                    tracing::warn!(%error, "the events stream cannot read its principal");
                    return Err(CloseCode::UnknownError);
                }
            };
        match audience {
            Audience::Person(id) => Ok(id == fresh.person_id),
            Audience::Owners => Ok(fresh.is_owner()),
            Audience::HostReaders(host_id) => {
                let unknown = |error: &dyn std::fmt::Display| {
                    tracing::warn!(%error, "the events stream cannot check host.read");
                    CloseCode::UnknownError
                };
                let mut conn = state
                    .db()
                    .pool()
                    .acquire()
                    .await
                    .map_err(|error| unknown(&error))?;
                may_read_host(&mut conn, &Principal::Person(fresh), host_id, now)
                    .await
                    .map_err(|error| unknown(&error))
            }
        }
    }
}

/// Writes the queue to the socket, each message under `gateway.write_timeout`.
async fn write_queue(
    sink: &mut SplitSink<WebSocket, Message>,
    outbound: &mut mpsc::Receiver<Outbound>,
    write_timeout: Duration,
    delivered: &Counter,
) -> WriterEnd {
    // `None` never comes while this runs: the socket's loop holds the sender
    // and drops this future first.
    while let Some(Outbound { message, is_event }) = outbound.recv().await {
        match tokio::time::timeout(write_timeout, sink.send(message)).await {
            Ok(Ok(())) => {
                if is_event {
                    delivered.inc();
                }
            }
            Ok(Err(_)) => return WriterEnd::Broken,
            Err(_) => return WriterEnd::Stalled,
        }
    }
    WriterEnd::Broken
}

/// Sends the close frame (at most `write_timeout`), then waits for the
/// client's (at most [`CLOSE_ANSWER_WAIT`]), so the server closes the TCP
/// connection after the handshake, when the client has read the code.
async fn close(
    sink: &mut SplitSink<WebSocket, Message>,
    stream: &mut SplitStream<WebSocket>,
    code: CloseCode,
    write_timeout: Duration,
) {
    let frame = Message::Close(Some(CloseFrame {
        code: code.as_u16(),
        reason: code.name().into(),
    }));
    if let Ok(Ok(())) = tokio::time::timeout(write_timeout, sink.send(frame)).await {
        read_to_end(stream, CLOSE_ANSWER_WAIT).await;
    }
}

/// Reads and drops frames until the stream ends, at most `limit` long.
async fn read_to_end(stream: &mut SplitStream<WebSocket>, limit: Duration) {
    let _ = tokio::time::timeout(limit, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
}
