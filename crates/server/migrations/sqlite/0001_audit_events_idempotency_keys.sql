-- 0001: the audit log (spec 10.1), the durable event log (10.2; DESIGN 3.3) and
-- the idempotency keys of state-changing POSTs (DESIGN 3.4). Identity, host and
-- terminal tables come in later migrations.
--
-- Append-only: never edit a file that may have been applied anywhere; change the
-- schema with a new, higher-numbered file (sqlx refuses a changed checksum).
--
-- SQLite: STRICT tables, so a value of the wrong type is an error, not a silent
-- conversion. IDs are TEXT (hyphenated UUIDv7, lower case), times INTEGER Unix
-- milliseconds (64 bit), JSON TEXT (always an object).

CREATE TABLE audit (
    id          TEXT    NOT NULL PRIMARY KEY,
    at          INTEGER NOT NULL,
    action      TEXT    NOT NULL,
    decision    TEXT    NOT NULL CHECK (decision IN ('allow', 'deny')),
    actor_kind  TEXT    NOT NULL CHECK (actor_kind IN ('person', 'agent', 'app', 'host', 'system')),
    actor_id    TEXT,
    target_kind TEXT,
    target_id   TEXT,
    details     TEXT    NOT NULL CHECK (json_valid(details) AND substr(details, 1, 1) = '{'),
    CHECK ((actor_kind = 'system') = (actor_id IS NULL)),
    CHECK ((target_kind IS NULL) = (target_id IS NULL))
) STRICT;

-- Keyset paging (newest first by id) under each filter of GET /api/v1/audit.
CREATE INDEX audit_at ON audit (at);
CREATE INDEX audit_action_id ON audit (action, id);
CREATE INDEX audit_actor_id ON audit (actor_id, id);
CREATE INDEX audit_target_id ON audit (target_id, id);

CREATE TABLE events (
    -- AUTOINCREMENT: a position is never used twice, even after the newest rows
    -- were deleted, so "after position N" always means the same events.
    position      INTEGER PRIMARY KEY AUTOINCREMENT,
    kind          TEXT    NOT NULL,
    audience_kind TEXT    NOT NULL CHECK (audience_kind IN ('person', 'host_readers', 'owners')),
    audience_id   TEXT,
    payload       TEXT    NOT NULL CHECK (json_valid(payload) AND substr(payload, 1, 1) = '{'),
    at            INTEGER NOT NULL,
    CHECK ((audience_kind = 'owners') = (audience_id IS NULL))
) STRICT;

CREATE INDEX events_at ON events (at);

-- One stored response per (principal, Idempotency-Key); the request hash tells a
-- retry (same request) from a reuse of the key for another request.
CREATE TABLE idempotency_keys (
    principal_id    TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    route           TEXT    NOT NULL,
    request_hash    TEXT    NOT NULL,
    response_status INTEGER NOT NULL,
    response_body   TEXT    NOT NULL,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (principal_id, key)
) STRICT;

CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
