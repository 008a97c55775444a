-- Rich authorization requests (RFC 9396): the authorization_details a person approved, as
-- canonical JSON (internal/authzdetails), kept with the code until it is redeemed and with each
-- token it leads to, so refresh and token exchange can hold later requests inside them. ''
-- for none, which is every row written before this migration (expand only: nothing reads a
-- column that an older server does not write).
ALTER TABLE auth_codes ADD COLUMN authorization_details TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN authorization_details TEXT NOT NULL DEFAULT '';
