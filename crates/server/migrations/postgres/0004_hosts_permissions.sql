-- 0004: hosts, pairing and permissions (spec 2.2 items 1-5, 3.1-3.3, 7.2-7.3,
-- 8.1-8.2): hosts with every column the chapter names, the assignments of
-- session users (host_session_users, ruling T12), grants on hosts, the
-- permission version, and terminal_sessions as far as the end function of the
-- terminal module needs it (issue "Terminal sessions" adds its own columns in a
-- later file). The code lives in src/hosts/, src/permissions/ and src/terminal/.
--
-- PostgreSQL: IDs TEXT COLLATE "C", times BIGINT Unix milliseconds, flags
-- BOOLEAN; otherwise the same tables as the SQLite file.
--
-- Append-only: never edit a file that may have been applied anywhere.
--
-- No secret: pairing codes only as base64url of HMAC-SHA-256 with the pepper;
-- the keys of a host are public keys. Reported lists are stored as the JSON the
-- host sent (names and display names only, never paths).

CREATE TABLE hosts (
    id                             TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name                           TEXT    NOT NULL,
    state                          TEXT    NOT NULL CHECK (state IN ('pairing', 'confirming', 'active', 'disabled', 'retired')),
    disabled_reason                TEXT    CHECK (disabled_reason IN ('owner', 'duplicate_connection')),
    disabled_at                    BIGINT,
    assigned_user_id               TEXT COLLATE "C" REFERENCES persons (principal_id),
    -- The keys handed over by host.pair; NULL while pairing (discarded keys).
    noise_public_key               TEXT,
    auth_public_jwk                TEXT,
    auth_jkt                       TEXT,
    -- Stays when keys are discarded (3.3: host_key_reused, old_fingerprint).
    key_fingerprint                TEXT,
    key_generation                 BIGINT NOT NULL DEFAULT 0,
    pairing_code_hash              TEXT    UNIQUE,
    pairing_expires_at             BIGINT,
    fingerprint_failures           BIGINT NOT NULL DEFAULT 0,
    llm_credentials                TEXT    NOT NULL DEFAULT 'none' CHECK (llm_credentials IN ('none', 'personal', 'organization')),
    credential_holder_id           TEXT COLLATE "C" REFERENCES persons (principal_id),
    -- The owner's answer to the mandatory question at the confirmation; NULL before.
    declared_server_host           BOOLEAN,
    -- The last report (host.pair, later the control connection's report).
    reported_session_users         TEXT,
    reported_profiles              TEXT,
    reported_doctor                TEXT,
    reported_is_server_host        BOOLEAN,
    reported_require_local_confirm BOOLEAN,
    reported_host_version          TEXT,
    reported_platform              TEXT,
    reported_os_version            TEXT,
    last_seen_at                   BIGINT,
    version                        BIGINT NOT NULL,
    created_by                     TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    created_at                     BIGINT NOT NULL,
    updated_at                     BIGINT NOT NULL,
    CHECK ((state = 'disabled') = (disabled_reason IS NOT NULL)),
    CHECK ((disabled_reason IS NULL) = (disabled_at IS NULL)),
    CHECK ((llm_credentials = 'personal') = (credential_holder_id IS NOT NULL)),
    CHECK ((noise_public_key IS NULL) = (auth_public_jwk IS NULL)),
    CHECK ((auth_public_jwk IS NULL) = (auth_jkt IS NULL)),
    CHECK ((pairing_code_hash IS NULL) = (pairing_expires_at IS NULL))
);

-- One login key belongs to one host (host_key_in_use).
CREATE UNIQUE INDEX hosts_auth_jkt ON hosts (auth_jkt) WHERE auth_jkt IS NOT NULL;

-- The assignment of a person to a session user of a host (2.2, ruling T12). A
-- row is never deleted: a name that belonged to anyone on this host stays taken
-- (os_user_folded unique per host over all rows, ended or not).
CREATE TABLE host_session_users (
    id             TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    host_id        TEXT COLLATE "C" NOT NULL REFERENCES hosts (id),
    person_id      TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    -- Exactly as reported (the host compares osu exactly).
    os_user        TEXT    NOT NULL,
    -- lower(os_user): uniqueness per host ignores case.
    os_user_folded TEXT    NOT NULL,
    assigned_by    TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    assigned_at    BIGINT NOT NULL,
    ended_by       TEXT COLLATE "C" REFERENCES persons (principal_id),
    ended_at       BIGINT,
    UNIQUE (host_id, os_user_folded),
    CHECK ((ended_at IS NULL) = (ended_by IS NULL))
);

-- At most one valid assignment per person and host.
CREATE UNIQUE INDEX host_session_users_one_valid ON host_session_users (host_id, person_id) WHERE ended_at IS NULL;
CREATE INDEX host_session_users_person_id ON host_session_users (person_id);

-- Grants (8.1): target host, capability terminal, recipient a person or a group.
CREATE TABLE grants (
    id             TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    target_kind    TEXT    NOT NULL CHECK (target_kind = 'host'),
    target_id      TEXT COLLATE "C" NOT NULL REFERENCES hosts (id),
    capability     TEXT    NOT NULL CHECK (capability = 'terminal'),
    recipient_kind TEXT    NOT NULL CHECK (recipient_kind IN ('person', 'group')),
    recipient_id   TEXT COLLATE "C" NOT NULL,
    created_by     TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT,
    revoked_by     TEXT COLLATE "C" REFERENCES persons (principal_id),
    revoked_at     BIGINT,
    CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
);

CREATE UNIQUE INDEX grants_one_valid ON grants (target_id, capability, recipient_kind, recipient_id) WHERE revoked_at IS NULL;
CREATE INDEX grants_recipient ON grants (recipient_kind, recipient_id);

-- The permission version: raised by every change of effective permissions
-- (grants, roles, assignments, host states, declarations). One row.
CREATE TABLE permission_version (
    id      SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);

INSERT INTO permission_version (id, version) VALUES (1, 0);

-- The ID of this server instance (host.pair answers it as instance_id): made
-- once, on the first request that needs it, and kept.
CREATE TABLE instance (
    id         SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    instance_id TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL
);

-- Terminal sessions (6.6) as far as ending them needs; the terminal module adds
-- its columns (token, relay counters, ...) in a later migration.
CREATE TABLE terminal_sessions (
    id                   TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    host_id              TEXT COLLATE "C" NOT NULL REFERENCES hosts (id),
    person_id            TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    login_session_id     TEXT COLLATE "C" NOT NULL REFERENCES login_sessions (id),
    device_id            TEXT COLLATE "C" REFERENCES devices (id),
    host_session_user_id TEXT COLLATE "C" NOT NULL REFERENCES host_session_users (id),
    profile              TEXT    NOT NULL,
    state                TEXT    NOT NULL CHECK (state IN ('opening', 'active', 'detached', 'closed')),
    close_reason         TEXT,
    close_detail         TEXT,
    created_at           BIGINT NOT NULL,
    started_at           BIGINT,
    ended_at             BIGINT,
    last_input_at        BIGINT,
    bytes_in             BIGINT NOT NULL DEFAULT 0,
    bytes_out            BIGINT NOT NULL DEFAULT 0,
    version              BIGINT NOT NULL,
    CHECK ((state = 'closed') = (close_reason IS NOT NULL)),
    CHECK ((state = 'closed') = (ended_at IS NOT NULL)),
    CHECK (close_detail IS NULL OR close_reason IS NOT NULL)
);

CREATE INDEX terminal_sessions_host_open ON terminal_sessions (host_id) WHERE state <> 'closed';
CREATE INDEX terminal_sessions_person_open ON terminal_sessions (person_id) WHERE state <> 'closed';
