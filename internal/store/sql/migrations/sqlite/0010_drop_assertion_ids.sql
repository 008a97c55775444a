-- Redeemed ID-JAGs are remembered in used_once, like the jti of DPoP proofs and client
-- assertions: one insert-once table with expiry. Rows here outlived their assertion anyway
-- (the assertion is refused as expired once its row expires), so nothing is lost.
DROP TABLE assertion_ids;
