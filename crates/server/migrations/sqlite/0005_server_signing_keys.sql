-- 0005: the server's signing keys (spec 5.3 "Terminal session token" and "JWKS
-- refresh", 3.5 hello; DESIGN 3.3): Ed25519 keys of purpose terminal that sign
-- terminal session tokens, published to the host services as a JWKS (next,
-- active and retiring keys). The code lives in src/terminal/keys.rs; the life
-- cycle is docs/decisions.md D-50.
--
-- Append-only: never edit a file that may have been applied anywhere.
--
-- No secret in the clear: private_sealed is base64url of nonce || ciphertext ||
-- tag, ChaCha20-Poly1305 under a key derived from the pepper, bound to id, purpose
-- and kid. It is NULL from the moment a key stops signing (retiring, retired).
--
-- Life cycle: next (published, does not sign before activates_at) -> active
-- (signs) -> retiring (published until published_until, when every token it
-- signed has expired) -> retired (kept as history, never published). A next key
-- withdrawn by an emergency rotation goes straight to retired.

CREATE TABLE server_signing_keys (
    id              TEXT    NOT NULL PRIMARY KEY,
    purpose         TEXT    NOT NULL CHECK (purpose IN ('terminal')),
    -- The RFC 7638 thumbprint of public_jwk: the kid of the JWKS and of the tokens.
    kid             TEXT    NOT NULL UNIQUE,
    -- {"crv":"Ed25519","kty":"OKP","x":...}, exactly as bothy-proto writes it.
    public_jwk      TEXT    NOT NULL,
    private_sealed  TEXT,
    status          TEXT    NOT NULL CHECK (status IN ('next', 'active', 'retiring', 'retired')),
    -- Created and published (in the JWKS from its commit on).
    created_at      INTEGER NOT NULL,
    -- The earliest time the key signs: created_at + agent.jwks_max_age for a
    -- scheduled rotation, created_at for the first key and an emergency rotation.
    activates_at    INTEGER NOT NULL,
    activated_at    INTEGER,
    -- From when the key no longer signs.
    retiring_at     INTEGER,
    -- Until when a retiring key stays in the JWKS.
    published_until INTEGER,
    retired_at      INTEGER,
    CHECK (activates_at >= created_at),
    CHECK ((private_sealed IS NULL) = (status IN ('retiring', 'retired'))),
    CHECK (status <> 'next' OR (activated_at IS NULL AND retiring_at IS NULL AND published_until IS NULL AND retired_at IS NULL)),
    CHECK (status <> 'active' OR (activated_at IS NOT NULL AND retiring_at IS NULL AND published_until IS NULL AND retired_at IS NULL)),
    CHECK (status <> 'retiring' OR (activated_at IS NOT NULL AND retiring_at IS NOT NULL AND published_until IS NOT NULL AND retired_at IS NULL)),
    CHECK (status <> 'retired' OR (published_until IS NOT NULL AND retired_at IS NOT NULL))
) STRICT;

-- At most one active and one next key per purpose. The index on the active key
-- is what makes creating the first key race-safe across processes and nodes: the
-- second insert fails, and its caller reads the winner's key.
CREATE UNIQUE INDEX server_signing_keys_one_active ON server_signing_keys (purpose) WHERE status = 'active';
CREATE UNIQUE INDEX server_signing_keys_one_next ON server_signing_keys (purpose) WHERE status = 'next';
