-- Passkeys (docs/passkeys.md).

-- How the person signed in (RFC 8176 amr: pwd, hwk, swk, or oidc); '' for older sessions.
ALTER TABLE sessions ADD COLUMN method TEXT NOT NULL DEFAULT '';

-- People's WebAuthn credentials. A credential ID is unique in its project; the same
-- authenticator may hold credentials for several projects, each its own row.
CREATE TABLE passkeys (
	project            TEXT    NOT NULL,
	credential_id      BYTEA   NOT NULL,
	subject            TEXT    NOT NULL,
	name               TEXT    NOT NULL,
	public_key         BYTEA   NOT NULL,
	sign_count         BIGINT  NOT NULL,
	transports         TEXT    NOT NULL,
	aaguid             BYTEA   NOT NULL,
	attestation_format TEXT    NOT NULL,
	user_verified      BIGINT  NOT NULL,
	backup_eligible    BIGINT  NOT NULL,
	backup_state       BIGINT  NOT NULL,
	created_at         BIGINT  NOT NULL,
	last_used_at       BIGINT  NOT NULL,
	PRIMARY KEY (project, credential_id)
);
CREATE INDEX passkeys_subject ON passkeys (project, subject);

-- A ceremony between its options and the browser's answer, keyed by the hash of a cookie
-- in that browser; taken (deleted) once.
CREATE TABLE passkey_ceremonies (
	id_hash    BYTEA   NOT NULL PRIMARY KEY,
	project    TEXT    NOT NULL,
	kind       TEXT    NOT NULL,
	subject    TEXT    NOT NULL,
	data       BYTEA   NOT NULL,
	expires_at BIGINT  NOT NULL
);
CREATE INDEX passkey_ceremonies_expires ON passkey_ceremonies (expires_at);
