-- Times are Unix nanoseconds (UTC); lists and maps are JSON text; secrets are SHA-256 hashes.

CREATE TABLE people (
	project        TEXT    NOT NULL,
	id             TEXT    NOT NULL,
	source         TEXT    NOT NULL,
	source_subject TEXT    NOT NULL,
	email          TEXT    NOT NULL,
	name           TEXT    NOT NULL,
	created_at     INTEGER NOT NULL,
	PRIMARY KEY (project, id)
);
CREATE UNIQUE INDEX people_source ON people (project, source, source_subject);

CREATE TABLE sessions (
	id_hash    BLOB    NOT NULL PRIMARY KEY,
	project    TEXT    NOT NULL,
	subject    TEXT    NOT NULL,
	auth_time  INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires_at);

CREATE TABLE clients (
	project                    TEXT    NOT NULL,
	id                         TEXT    NOT NULL,
	secret_hash                BLOB,
	registration_token_hash    BLOB,
	name                       TEXT    NOT NULL,
	uri                        TEXT    NOT NULL,
	logo_uri                   TEXT    NOT NULL,
	redirect_uris              TEXT    NOT NULL,
	grant_types                TEXT    NOT NULL,
	response_types             TEXT    NOT NULL,
	token_endpoint_auth_method TEXT    NOT NULL,
	scope                      TEXT    NOT NULL,
	metadata                   BLOB,
	created_at                 INTEGER NOT NULL,
	updated_at                 INTEGER NOT NULL,
	PRIMARY KEY (project, id)
);

CREATE TABLE grants (
	project    TEXT    NOT NULL,
	subject    TEXT    NOT NULL,
	client_id  TEXT    NOT NULL,
	scopes     TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (project, subject, client_id)
);
CREATE INDEX grants_client ON grants (project, client_id);

CREATE TABLE auth_codes (
	hash                  BLOB    NOT NULL PRIMARY KEY,
	project               TEXT    NOT NULL,
	client_id             TEXT    NOT NULL,
	subject               TEXT    NOT NULL,
	redirect_uri          TEXT    NOT NULL,
	scopes                TEXT    NOT NULL,
	resource              TEXT    NOT NULL,
	code_challenge        TEXT    NOT NULL,
	code_challenge_method TEXT    NOT NULL,
	nonce                 TEXT    NOT NULL,
	auth_time             INTEGER NOT NULL,
	expires_at            INTEGER NOT NULL,
	created_at            INTEGER NOT NULL,
	used_at               INTEGER
);
CREATE INDEX auth_codes_expires ON auth_codes (expires_at);

CREATE TABLE tokens (
	hash         BLOB    NOT NULL PRIMARY KEY,
	kind         TEXT    NOT NULL,
	project      TEXT    NOT NULL,
	client_id    TEXT    NOT NULL,
	subject      TEXT    NOT NULL,
	scopes       TEXT    NOT NULL,
	audience     TEXT    NOT NULL,
	family_id    TEXT    NOT NULL,
	generation   INTEGER NOT NULL,
	code_hash    BLOB,
	auth_time    INTEGER NOT NULL,
	issued_at    INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	revoked_at   INTEGER,
	rotated_at   INTEGER,
	-- sealed is the token response of the rotation that retired this refresh token, kept
	-- until replay_until so a retried refresh gets the same pair back (decision 0008).
	sealed       BLOB,
	replay_until INTEGER
);
CREATE INDEX tokens_family ON tokens (family_id, generation);
-- Reuse detection, grant withdrawal, policy enforcement and counting all look for the live
-- tokens of a client (for a person); revoked tokens leave the index.
CREATE INDEX tokens_holder ON tokens (project, client_id, subject) WHERE revoked_at IS NULL;
CREATE INDEX tokens_code ON tokens (code_hash) WHERE code_hash IS NOT NULL;
CREATE INDEX tokens_expires ON tokens (expires_at);
CREATE INDEX tokens_replay ON tokens (replay_until) WHERE sealed IS NOT NULL;

CREATE TABLE connections (
	id            TEXT    NOT NULL PRIMARY KEY,
	project       TEXT    NOT NULL,
	subject       TEXT    NOT NULL,
	connector     TEXT    NOT NULL,
	account_id    TEXT    NOT NULL,
	account_name  TEXT    NOT NULL,
	key_id        TEXT    NOT NULL,
	access_token  BLOB,
	refresh_token BLOB,
	token_type    TEXT    NOT NULL,
	expiry        INTEGER,
	scopes        TEXT    NOT NULL,
	status        TEXT    NOT NULL,
	-- version changes on every write; UpdateConnection on SQLite writes only if it is unchanged.
	version       INTEGER NOT NULL,
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX connections_account ON connections (project, subject, connector, account_id);
-- The target of agent_permissions' foreign key: a permission can only name a connection of the
-- same person and connector. It also serves ListConnections.
CREATE UNIQUE INDEX connections_owner ON connections (project, subject, connector, id);

CREATE TABLE agent_permissions (
	project       TEXT    NOT NULL,
	subject       TEXT    NOT NULL,
	connector     TEXT    NOT NULL,
	client_id     TEXT    NOT NULL,
	connection_id TEXT    NOT NULL,
	created_at    INTEGER NOT NULL,
	PRIMARY KEY (project, subject, connector, client_id),
	FOREIGN KEY (project, subject, connector, connection_id)
		REFERENCES connections (project, subject, connector, id) ON DELETE CASCADE
);
CREATE INDEX agent_permissions_connection ON agent_permissions (project, subject, connector, connection_id);
CREATE INDEX agent_permissions_client ON agent_permissions (project, client_id);

CREATE TABLE callback_states (
	state_hash   BLOB    NOT NULL PRIMARY KEY,
	project      TEXT    NOT NULL,
	subject      TEXT    NOT NULL,
	connector    TEXT    NOT NULL,
	purpose      TEXT    NOT NULL,
	link_id      TEXT    NOT NULL,
	verifier     BLOB,
	key_id       TEXT    NOT NULL,
	binding_hash BLOB,
	confirm_hash BLOB,
	expires_at   INTEGER NOT NULL,
	created_at   INTEGER NOT NULL
);
CREATE INDEX callback_states_expires ON callback_states (expires_at);

CREATE TABLE links (
	id          TEXT    NOT NULL PRIMARY KEY,
	code_hash   BLOB    NOT NULL,
	sealed_code BLOB,
	key_id      TEXT    NOT NULL,
	project     TEXT    NOT NULL,
	subject     TEXT    NOT NULL,
	client_id   TEXT    NOT NULL,
	connector   TEXT    NOT NULL,
	kind        TEXT    NOT NULL,
	state       TEXT    NOT NULL,
	expires_at  INTEGER NOT NULL,
	created_at  INTEGER NOT NULL,
	closed_at   INTEGER
);
CREATE UNIQUE INDEX links_code ON links (code_hash);
-- One open link per person x agent x connector (an agent asking again gets the same link), even under concurrent requests.
CREATE UNIQUE INDEX links_open ON links (project, subject, client_id, connector) WHERE state = 'open';
CREATE INDEX links_expires ON links (expires_at);

CREATE TABLE audit (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	project TEXT    NOT NULL,
	time    INTEGER NOT NULL,
	actor   TEXT    NOT NULL,
	action  TEXT    NOT NULL,
	target  TEXT    NOT NULL,
	details TEXT    NOT NULL
);
CREATE INDEX audit_project ON audit (project, id);

CREATE TABLE events (
	seq          INTEGER PRIMARY KEY AUTOINCREMENT,
	id           TEXT    NOT NULL,
	sink         TEXT    NOT NULL,
	project      TEXT    NOT NULL,
	type         TEXT    NOT NULL,
	data         BLOB,
	created_at   INTEGER NOT NULL,
	attempts     INTEGER NOT NULL,
	next_attempt INTEGER NOT NULL,
	delivered_at INTEGER
);
CREATE UNIQUE INDEX events_id ON events (id, sink);
CREATE INDEX events_due ON events (next_attempt) WHERE delivered_at IS NULL;
CREATE INDEX events_delivered ON events (delivered_at) WHERE delivered_at IS NOT NULL;
