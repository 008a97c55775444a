-- A replayed authorization code is marked before what it issued is revoked, and the redemption
-- that won reads the mark after storing its tokens, so no interleaving leaves tokens of a
-- replayed code alive (RFC 6749 §4.1.2; store.AuthCodes.AuthCodeReplayed). Expand only: an
-- older replica neither marks nor reads it and keeps its former behaviour.
ALTER TABLE auth_codes ADD COLUMN replayed_at BIGINT;
