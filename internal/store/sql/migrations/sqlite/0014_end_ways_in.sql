-- Ending a person's access (docs/leavers.md) deletes their authorization codes and pending
-- passkey enrolments in the same transaction as their sessions and tokens: by person, not by
-- a full scan of either table.
CREATE INDEX auth_codes_subject ON auth_codes (project, subject);
CREATE INDEX passkey_ceremonies_subject ON passkey_ceremonies (project, subject);
