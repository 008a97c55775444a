-- People who leave lose access (docs/leavers.md).

-- A back-channel logout token may name only the provider's session ("issuer|sid").
ALTER TABLE sessions ADD COLUMN upstream_sid TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_upstream_sid ON sessions (project, upstream_sid) WHERE upstream_sid <> '';
-- Ending a person's sign-ins finds their sessions and live tokens.
CREATE INDEX IF NOT EXISTS sessions_subject ON sessions (project, subject);
CREATE INDEX IF NOT EXISTS tokens_subject ON tokens (project, subject) WHERE revoked_at IS NULL;

-- Back-channel logout token ids already acted on, so a replayed token ends nothing.
CREATE TABLE logout_tokens (
	project    TEXT    NOT NULL,
	jti        TEXT    NOT NULL,
	expires_at BIGINT  NOT NULL,
	PRIMARY KEY (project, jti)
);
CREATE INDEX logout_tokens_expires ON logout_tokens (expires_at);

-- What re-checking a person at the project's OpenID provider needs: the provider's refresh
-- token, sealed, and when the provider last confirmed the person.
CREATE TABLE person_checks (
	project       TEXT    NOT NULL,
	subject       TEXT    NOT NULL,
	key_id        TEXT    NOT NULL,
	refresh_token BYTEA   NOT NULL,
	checked_at    BIGINT  NOT NULL,
	tried_at      BIGINT  NOT NULL,
	PRIMARY KEY (project, subject)
);
