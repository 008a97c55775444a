-- Delegation (docs/delegation.md, docs/decisions/0075): a token's act and may_act claims
-- (RFC 8693 §4.1, §4.4) as JSON, "" for none. Expand only: older replicas neither read nor
-- write the column, and their tokens carry no chain.
ALTER TABLE tokens ADD COLUMN delegation TEXT NOT NULL DEFAULT '';

-- Which agents received each connection's token for its person, and through which agents
-- (via, the latest first, space-separated; "" when the token was issued to the agent itself),
-- with the last time: what the admin API's connections show as actors.
CREATE TABLE connection_actors (
    project       TEXT   NOT NULL,
    connection_id TEXT   NOT NULL REFERENCES connections (id) ON DELETE CASCADE,
    client_id     TEXT   NOT NULL,
    via           TEXT   NOT NULL,
    last_used_at  BIGINT NOT NULL,
    PRIMARY KEY (connection_id, client_id, via)
);
