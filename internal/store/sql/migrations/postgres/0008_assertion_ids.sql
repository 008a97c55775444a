-- Identity assertions (ID-JAG, RFC 7523 JWT bearer grants) redeemed, by issuer and jti, so each
-- is redeemed once. A row outlives its assertion's expiry by the accepted clock skew, after
-- which the assertion is refused as expired anyway and garbage collection removes the row.
CREATE TABLE assertion_ids (
	project    TEXT    NOT NULL,
	issuer     TEXT    NOT NULL,
	jti        TEXT    NOT NULL,
	expires_at BIGINT NOT NULL,
	PRIMARY KEY (project, issuer, jti)
);
CREATE INDEX assertion_ids_expires ON assertion_ids (expires_at);
