-- 0007: the expiry of a grant is a revocation (spec 8.3): the job
-- terminal.sweep ends, once, the sessions of every person who lost terminal
-- when a grant expired, and marks the grant done here so it is never looked
-- at again.
--
-- Append-only: never edit a file that may have been applied anywhere.

-- When the sweep ended the sessions an expired grant took away (NULL: not yet,
-- or the grant has not expired).
ALTER TABLE grants ADD COLUMN expiry_swept_at INTEGER;

CREATE INDEX grants_expiry_due ON grants (expires_at) WHERE expiry_swept_at IS NULL AND revoked_at IS NULL AND expires_at IS NOT NULL;
