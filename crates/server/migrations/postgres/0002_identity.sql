-- 0002: identity (DESIGN 3.1, 3.3): principals (person, agent, app), persons,
-- groups and their members, enrollment codes, TOTP credentials, devices, login
-- sessions, step-ups and API tokens. The code lives in src/identity/.
--
-- PostgreSQL: IDs TEXT COLLATE "C", times BIGINT Unix milliseconds; otherwise the
-- same tables as the SQLite file.
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
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    kind       TEXT    NOT NULL CHECK (kind IN ('person', 'agent', 'app')),
    -- The name of an agent or app; persons have theirs in persons.username.
    label      TEXT,
    created_at BIGINT NOT NULL,
    CHECK ((kind = 'person') = (label IS NULL))
);

CREATE TABLE persons (
    principal_id  TEXT COLLATE "C" NOT NULL PRIMARY KEY REFERENCES principals (id),
    -- Case-insensitive usernames: the server folds to lower case, the index compares.
    username      TEXT    NOT NULL UNIQUE CHECK (username = lower(username)),
    role          TEXT    NOT NULL CHECK (role IN ('owner', 'member')),
    status        TEXT    NOT NULL CHECK (status IN ('active', 'disabled', 'deleted')),
    password_hash TEXT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE groups (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE CHECK (name = lower(name)),
    created_at BIGINT NOT NULL
);

CREATE TABLE group_members (
    group_id  TEXT COLLATE "C" NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    person_id TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    added_at  BIGINT NOT NULL,
    PRIMARY KEY (group_id, person_id)
);

CREATE INDEX group_members_person_id ON group_members (person_id);

CREATE TABLE enrollment_codes (
    id                    TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    person_id             TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    code_hash             TEXT    NOT NULL UNIQUE,
    purpose               TEXT    NOT NULL CHECK (purpose IN ('bootstrap', 'invite', 'reset_second_factor')),
    created_at            BIGINT NOT NULL,
    expires_at            BIGINT NOT NULL,
    used_at               BIGINT,
    -- Set by POST /auth/enroll, moved to persons.password_hash at the confirmation.
    pending_password_hash TEXT
);

CREATE INDEX enrollment_codes_person_id ON enrollment_codes (person_id);

CREATE TABLE totp_credentials (
    id                 TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    person_id          TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    -- The code whose enrollment created it, while pending.
    enrollment_code_id TEXT COLLATE "C" REFERENCES enrollment_codes (id) ON DELETE CASCADE,
    secret_sealed      TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN ('pending', 'active')),
    -- The last RFC 6238 time step accepted: each step is accepted once.
    last_used_step     BIGINT,
    created_at         BIGINT NOT NULL,
    activated_at       BIGINT,
    CHECK ((status = 'pending') = (enrollment_code_id IS NOT NULL))
);

CREATE UNIQUE INDEX totp_credentials_one_active ON totp_credentials (person_id) WHERE status = 'active';
CREATE INDEX totp_credentials_enrollment_code_id ON totp_credentials (enrollment_code_id);

CREATE TABLE devices (
    id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    person_id     TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    name          TEXT    NOT NULL,
    -- The raw 32-byte Ed25519 public key, base64url without padding.
    public_key    TEXT    NOT NULL,
    created_at    BIGINT NOT NULL,
    last_login_at BIGINT NOT NULL,
    revoked_at    BIGINT,
    UNIQUE (person_id, public_key)
);

CREATE TABLE login_sessions (
    id               TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    person_id        TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    device_id        TEXT COLLATE "C" REFERENCES devices (id),
    client_component TEXT    NOT NULL CHECK (client_component IN ('cli', 'console')),
    token_hash       TEXT    NOT NULL UNIQUE,
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    ended_at         BIGINT,
    end_reason       TEXT    CHECK (end_reason IN ('logout', 'session_revoked', 'device_revoked', 'user_disabled')),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL)),
    CHECK ((client_component = 'cli') = (device_id IS NOT NULL))
);

CREATE INDEX login_sessions_person_id ON login_sessions (person_id);
CREATE INDEX login_sessions_device_id ON login_sessions (device_id);

CREATE TABLE step_ups (
    id               TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    login_session_id TEXT COLLATE "C" NOT NULL REFERENCES login_sessions (id),
    method           TEXT    NOT NULL CHECK (method IN ('totp', 'webauthn')),
    created_at       BIGINT NOT NULL,
    -- created_at + terminal.step_up_max_age: consumable up to and including it.
    expires_at       BIGINT NOT NULL,
    consumed_at      BIGINT
);

CREATE INDEX step_ups_login_session_id ON step_ups (login_session_id);

CREATE TABLE api_tokens (
    id           TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    principal_id TEXT COLLATE "C" NOT NULL REFERENCES principals (id),
    token_hash   TEXT    NOT NULL UNIQUE,
    created_by   TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT
);

CREATE INDEX api_tokens_principal_id ON api_tokens (principal_id);
