-- WebAuthn passkeys of the web console (DESIGN 3.1; spec 24 6.2 "Step-up", 12).

-- A person's passkeys: the webauthn-rs `Passkey` serialized as JSON (public key,
-- counter, backup flags), updated at every use.
CREATE TABLE passkeys (
    id            TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    person_id     TEXT COLLATE "C" NOT NULL REFERENCES persons (principal_id),
    -- base64url of the credential ID, unique over all persons.
    credential_id TEXT COLLATE "C" NOT NULL UNIQUE,
    passkey       TEXT    NOT NULL,
    created_at    BIGINT NOT NULL,
    last_used_at  BIGINT
);

CREATE INDEX passkeys_person_id ON passkeys (person_id);

-- Challenges between a start and a finish call: single use, bound to what they
-- were issued for, valid until expires_at (exclusive).
CREATE TABLE webauthn_challenges (
    id                 TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    purpose            TEXT    NOT NULL CHECK (purpose IN ('enroll', 'register', 'console_login', 'step_up')),
    -- The person (enroll, register, step_up; console_login of a known username).
    person_id          TEXT COLLATE "C" REFERENCES persons (principal_id),
    enrollment_code_id TEXT COLLATE "C",
    login_session_id   TEXT COLLATE "C" REFERENCES login_sessions (id),
    -- The webauthn-rs registration or authentication state (JSON); NULL for the
    -- decoy of an unknown username.
    state              TEXT,
    created_at         BIGINT NOT NULL,
    expires_at         BIGINT NOT NULL,
    used_at            BIGINT
);

-- The HMAC (pepper) of a console session's CSRF token; NULL for CLI sessions.
ALTER TABLE login_sessions ADD COLUMN csrf_hash TEXT;
