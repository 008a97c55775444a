-- DPoP, client assertions and pushed authorization requests.

-- DPoP (RFC 9449): the thumbprint of the key an access or refresh token is bound to, '' when
-- the token is a plain bearer token.
ALTER TABLE tokens ADD COLUMN jkt TEXT NOT NULL DEFAULT '';

-- One-time identifiers (the jti of DPoP proofs and of client assertions), each kept until the
-- identifier could no longer be accepted anyway; the key is a hash naming what it is for.
CREATE TABLE used_once (
	key        BYTEA NOT NULL PRIMARY KEY,
	expires_at BIGINT NOT NULL
);
CREATE INDEX used_once_expires ON used_once (expires_at);

-- Pushed authorization requests (RFC 9126): the validated parameters of an authorization
-- request a client pushed, found by the hash of its request_uri, used once.
CREATE TABLE pushed_requests (
	hash       BYTEA NOT NULL PRIMARY KEY,
	project    TEXT NOT NULL,
	client_id  TEXT NOT NULL,
	params     TEXT NOT NULL,
	expires_at BIGINT NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE INDEX pushed_requests_expires ON pushed_requests (expires_at);
