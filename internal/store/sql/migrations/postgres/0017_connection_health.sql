-- Connection states (docs/connection-health.md, docs/decisions/0061-connection-states.md).
-- "broken" splits in two. It was written in two cases: a token that expired with no refresh
-- token to renew it (needs_reconnect), and a refresh the service refused (revoked_upstream).
-- A row's refresh token tells which.
UPDATE connections SET status = 'needs_reconnect' WHERE status = 'broken' AND refresh_token IS NULL;
UPDATE connections SET status = 'revoked_upstream' WHERE status = 'broken';

-- When an agent last received the connection's token, in nanoseconds (NULL: not since this
-- column exists). Each replica writes it at most once per interval, in the background, never
-- in the exchange itself; it is not part of the row's version, so recording a use never makes
-- a refresh's write fail.
ALTER TABLE connections ADD COLUMN last_used_at BIGINT;

-- The background refresher asks for the connections whose token expires soonest.
CREATE INDEX connections_expiry ON connections (expiry, id) WHERE expiry IS NOT NULL;
