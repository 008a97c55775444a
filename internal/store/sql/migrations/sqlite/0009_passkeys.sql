-- Passkeys (docs/passkeys.md).

-- How the person signed in (RFC 8176 amr: pwd, hwk, swk, or oidc); '' for older sessions.
ALTER TABLE sessions ADD COLUMN method TEXT NOT NULL DEFAULT '';

-- People's WebAuthn credentials. A credential ID is unique in its project; the same
-- authenticator may hold credentials for several projects, each its own row.
CREATE TABLE passkeys (
	project            TEXT    NOT NULL,
	credential_id      BLOB    NOT NULL,
	subject            TEXT    NOT NULL,
	name               TEXT    NOT NULL,
	public_key         BLOB    NOT NULL,
	sign_count         INTEGER NOT NULL,
	transports         TEXT    NOT NULL,
	aaguid             BLOB    NOT NULL,
	attestation_format TEXT    NOT NULL,
	user_verified      INTEGER NOT NULL,
	backup_eligible    INTEGER NOT NULL,
	backup_state       INTEGER NOT NULL,
	created_at         INTEGER NOT NULL,
	last_used_at       INTEGER NOT NULL,
	PRIMARY KEY (project, credential_id)
);
CREATE INDEX passkeys_subject ON passkeys (project, subject);

-- A ceremony between its options and the browser's answer, keyed by the hash of a cookie
-- in that browser; taken (deleted) once.
CREATE TABLE passkey_ceremonies (
	id_hash    BLOB    NOT NULL PRIMARY KEY,
	project    TEXT    NOT NULL,
	kind       TEXT    NOT NULL,
	subject    TEXT    NOT NULL,
	data       BLOB    NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE INDEX passkey_ceremonies_expires ON passkey_ceremonies (expires_at);
