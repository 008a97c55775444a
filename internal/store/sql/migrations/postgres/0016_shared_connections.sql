-- Organisation-shared connections (docs/shared-connections.md). The shared connection itself is
-- a row of connections whose subject is "shared:<connector key>". No person may ever have that
-- subject: people's ids are random hex, and this constraint refuses any person whose id starts
-- with "shared:", so a person's token, session or end of access can never name a shared row.
ALTER TABLE people ADD CONSTRAINT people_id_not_shared CHECK (id NOT LIKE 'shared:%');

-- A start URL an administrator asked for through the admin API: single use (taking it deletes
-- it), short-lived, only its code's hash stored. actor is "kubernetes:<username>".
CREATE TABLE shared_starts (
	code_hash  BYTEA   NOT NULL PRIMARY KEY,
	id         TEXT    NOT NULL,
	project    TEXT    NOT NULL,
	connector  TEXT    NOT NULL,
	actor      TEXT    NOT NULL,
	created_at BIGINT  NOT NULL,
	expires_at BIGINT  NOT NULL
);
CREATE INDEX shared_starts_expires ON shared_starts (expires_at);
