-- 0006: the columns of terminal_sessions that opening, attaching and the relay
-- need (spec 5.3, 6.1-6.3, 6.6; DESIGN 3.3). 0004 made the table with what the
-- end function needs.
--
-- Append-only: never edit a file that may have been applied anywhere.

-- The current terminal session token: only its jti and expiry are stored (5.3).
ALTER TABLE terminal_sessions ADD COLUMN token_jti TEXT;
ALTER TABLE terminal_sessions ADD COLUMN token_expires_at INTEGER;
-- The grant time plus terminal.open_timeout: the opening must be paired by then (6.1).
ALTER TABLE terminal_sessions ADD COLUMN open_deadline_at INTEGER;
-- When the device side went away (6.2): detach grace and quick reattach count from here.
ALTER TABLE terminal_sessions ADD COLUMN detached_at INTEGER;
-- The index of the working directory (profile claude, 11.1).
ALTER TABLE terminal_sessions ADD COLUMN workdir_index INTEGER;
-- The owner opened on a host assigned to another person (8.4).
ALTER TABLE terminal_sessions ADD COLUMN foreign_assignee INTEGER NOT NULL DEFAULT 0 CHECK (foreign_assignee IN (0, 1));

CREATE UNIQUE INDEX terminal_sessions_token_jti ON terminal_sessions (token_jti) WHERE token_jti IS NOT NULL;
