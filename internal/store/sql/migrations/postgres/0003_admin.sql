-- The admin API (docs/admin.md): when a person last signed in and when an administrator last
-- ended their access (0: never), and the indexes its listings and revocations walk.
ALTER TABLE people ADD COLUMN signed_in_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE people ADD COLUMN access_ended_at BIGINT NOT NULL DEFAULT 0;
-- A person's sessions: counted in the people listing, deleted when their access ends.
CREATE INDEX sessions_subject ON sessions (project, subject);
-- Keyset pages of a project's connections and open links, in (project, id) order.
CREATE INDEX connections_project ON connections (project, id);
CREATE INDEX links_project_open ON links (project, id) WHERE state = 'open';
-- A person's live tokens, revoked when their access ends.
CREATE INDEX tokens_subject ON tokens (project, subject) WHERE revoked_at IS NULL;
-- A person's grants and open links (grants' primary key already leads with project, subject).
CREATE INDEX links_subject_open ON links (project, subject) WHERE state = 'open';
