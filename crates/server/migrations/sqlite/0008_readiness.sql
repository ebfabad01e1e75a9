-- 0008: the write probe of /readyz (docs/decisions.md D-352). One row, updated
-- in a unit of work by every readiness check that is not answered from the
-- last second's result: a database that answers reads but cannot write is not
-- ready.
--
-- Append-only: never edit a file that may have been applied anywhere.

CREATE TABLE readiness (
    id          INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    checked_at  BIGINT  NOT NULL
);

INSERT INTO readiness (id, checked_at) VALUES (1, 0);
