-- 0002: identity (DESIGN 3.1, 3.3): principals (person, agent, app), persons,
-- groups and their members, enrollment codes, TOTP credentials, devices, login
-- sessions, step-ups and API tokens. The code lives in src/identity/.
--
-- Append-only: never edit a file that may have been applied anywhere; change the
-- schema with a new, higher-numbered file (sqlx refuses a changed checksum).
--
-- No secret is stored as it was handed out: access tokens, API tokens and
-- enrollment codes only as base64url of HMAC-SHA-256 with the server pepper
-- (*_hash), passwords as argon2id PHC strings, TOTP secrets sealed with a key
-- derived from the pepper. Values of CHECK lists that only a later task writes
-- (client_component 'console', method 'webauthn') are allowed now, so that task
-- needs no table rebuild on SQLite.

CREATE TABLE principals (
    id         TEXT    NOT NULL PRIMARY KEY,
    kind       TEXT    NOT NULL CHECK (kind IN ('person', 'agent', 'app')),
    -- The name of an agent or app; persons have theirs in persons.username.
    label      TEXT,
    created_at INTEGER NOT NULL,
    CHECK ((kind = 'person') = (label IS NULL))
) STRICT;

CREATE TABLE persons (
    principal_id  TEXT    NOT NULL PRIMARY KEY REFERENCES principals (id),
    -- Case-insensitive usernames: the server folds to lower case, the index compares.
    username      TEXT    NOT NULL UNIQUE CHECK (username = lower(username)),
    role          TEXT    NOT NULL CHECK (role IN ('owner', 'member')),
    status        TEXT    NOT NULL CHECK (status IN ('active', 'disabled', 'deleted')),
    password_hash TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) STRICT;

CREATE TABLE groups (
    id         TEXT    NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE CHECK (name = lower(name)),
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE group_members (
    group_id  TEXT    NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    person_id TEXT    NOT NULL REFERENCES persons (principal_id),
    added_at  INTEGER NOT NULL,
    PRIMARY KEY (group_id, person_id)
) STRICT;

CREATE INDEX group_members_person_id ON group_members (person_id);

CREATE TABLE enrollment_codes (
    id                    TEXT    NOT NULL PRIMARY KEY,
    person_id             TEXT    NOT NULL REFERENCES persons (principal_id),
    code_hash             TEXT    NOT NULL UNIQUE,
    purpose               TEXT    NOT NULL CHECK (purpose IN ('bootstrap', 'invite', 'reset_second_factor')),
    created_at            INTEGER NOT NULL,
    expires_at            INTEGER NOT NULL,
    used_at               INTEGER,
    -- Set by POST /auth/enroll, moved to persons.password_hash at the confirmation.
    pending_password_hash TEXT
) STRICT;

CREATE INDEX enrollment_codes_person_id ON enrollment_codes (person_id);

CREATE TABLE totp_credentials (
    id                 TEXT    NOT NULL PRIMARY KEY,
    person_id          TEXT    NOT NULL REFERENCES persons (principal_id),
    -- The code whose enrollment created it, while pending.
    enrollment_code_id TEXT    REFERENCES enrollment_codes (id) ON DELETE CASCADE,
    secret_sealed      TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN ('pending', 'active')),
    -- The last RFC 6238 time step accepted: each step is accepted once.
    last_used_step     INTEGER,
    created_at         INTEGER NOT NULL,
    activated_at       INTEGER,
    CHECK ((status = 'pending') = (enrollment_code_id IS NOT NULL))
) STRICT;

CREATE UNIQUE INDEX totp_credentials_one_active ON totp_credentials (person_id) WHERE status = 'active';
CREATE INDEX totp_credentials_enrollment_code_id ON totp_credentials (enrollment_code_id);

CREATE TABLE devices (
    id            TEXT    NOT NULL PRIMARY KEY,
    person_id     TEXT    NOT NULL REFERENCES persons (principal_id),
    name          TEXT    NOT NULL,
    -- The raw 32-byte Ed25519 public key, base64url without padding.
    public_key    TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    last_login_at INTEGER NOT NULL,
    revoked_at    INTEGER,
    UNIQUE (person_id, public_key)
) STRICT;

CREATE TABLE login_sessions (
    id               TEXT    NOT NULL PRIMARY KEY,
    person_id        TEXT    NOT NULL REFERENCES persons (principal_id),
    device_id        TEXT    REFERENCES devices (id),
    client_component TEXT    NOT NULL CHECK (client_component IN ('cli', 'console')),
    token_hash       TEXT    NOT NULL UNIQUE,
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    ended_at         INTEGER,
    end_reason       TEXT    CHECK (end_reason IN ('logout', 'session_revoked', 'device_revoked', 'user_disabled')),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL)),
    CHECK ((client_component = 'cli') = (device_id IS NOT NULL))
) STRICT;

CREATE INDEX login_sessions_person_id ON login_sessions (person_id);
CREATE INDEX login_sessions_device_id ON login_sessions (device_id);

CREATE TABLE step_ups (
    id               TEXT    NOT NULL PRIMARY KEY,
    login_session_id TEXT    NOT NULL REFERENCES login_sessions (id),
    method           TEXT    NOT NULL CHECK (method IN ('totp', 'webauthn')),
    created_at       INTEGER NOT NULL,
    -- created_at + terminal.step_up_max_age: consumable up to and including it.
    expires_at       INTEGER NOT NULL,
    consumed_at      INTEGER
) STRICT;

CREATE INDEX step_ups_login_session_id ON step_ups (login_session_id);

CREATE TABLE api_tokens (
    id           TEXT    NOT NULL PRIMARY KEY,
    principal_id TEXT    NOT NULL REFERENCES principals (id),
    token_hash   TEXT    NOT NULL UNIQUE,
    created_by   TEXT    NOT NULL REFERENCES persons (principal_id),
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER,
    revoked_at   INTEGER
) STRICT;

CREATE INDEX api_tokens_principal_id ON api_tokens (principal_id);
