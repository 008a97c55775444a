-- Several accounts per person and connector (docs/several-accounts.md, docs/decisions/0059).
--
-- A person's default account for a connector: at most one connection per person x connector
-- carries the flag. The oldest connection of each person x connector becomes the default, as a
-- first connection does from now on.
ALTER TABLE connections ADD COLUMN is_default INTEGER NOT NULL DEFAULT 0;
UPDATE connections SET is_default = 1 WHERE NOT EXISTS (
	SELECT 1 FROM connections o WHERE o.project = connections.project AND o.subject = connections.subject
	AND o.connector = connections.connector
	AND (o.created_at < connections.created_at OR (o.created_at = connections.created_at AND o.id < connections.id)));
CREATE UNIQUE INDEX connections_default ON connections (project, subject, connector) WHERE is_default = 1;

-- An agent may be allowed several of a person's accounts at one connector: one permission per
-- person x connector x agent x connection. SQLite cannot change a primary key in place, so the
-- table is rebuilt with its rows.
CREATE TABLE agent_permissions_0015 (
	project       TEXT    NOT NULL,
	subject       TEXT    NOT NULL,
	connector     TEXT    NOT NULL,
	client_id     TEXT    NOT NULL,
	connection_id TEXT    NOT NULL,
	created_at    INTEGER NOT NULL,
	PRIMARY KEY (project, subject, connector, client_id, connection_id),
	FOREIGN KEY (project, subject, connector, connection_id)
		REFERENCES connections (project, subject, connector, id) ON DELETE CASCADE
);
INSERT INTO agent_permissions_0015 (project, subject, connector, client_id, connection_id, created_at)
	SELECT project, subject, connector, client_id, connection_id, created_at FROM agent_permissions;
DROP TABLE agent_permissions;
ALTER TABLE agent_permissions_0015 RENAME TO agent_permissions;
CREATE INDEX agent_permissions_connection ON agent_permissions (project, subject, connector, connection_id);
CREATE INDEX agent_permissions_client ON agent_permissions (project, client_id);

-- The account a connect or allow link was made for (the token exchange's account parameter),
-- '' when the agent named none.
ALTER TABLE links ADD COLUMN account TEXT NOT NULL DEFAULT '';
