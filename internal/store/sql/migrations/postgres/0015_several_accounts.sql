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
-- person x connector x agent x connection.
ALTER TABLE agent_permissions DROP CONSTRAINT agent_permissions_pkey;
ALTER TABLE agent_permissions ADD PRIMARY KEY (project, subject, connector, client_id, connection_id);

-- The account a connect or allow link was made for (the token exchange's account parameter),
-- '' when the agent named none.
ALTER TABLE links ADD COLUMN account TEXT NOT NULL DEFAULT '';
