-- DPoP authorization code binding (RFC 9449 §10): the thumbprint of the key the code's
-- redemption must prove, from dpop_jkt at /authorize or the DPoP proof of a pushed request;
-- '' when the code is not bound. A pushed request keeps dpop_jkt among its parameters.
ALTER TABLE auth_codes ADD COLUMN dpop_jkt TEXT NOT NULL DEFAULT '';
