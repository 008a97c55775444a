-- The store's revision (docs/decisions/0082): every replica moves it after each write that could
-- withdraw a permission, and the token proxy keeps a decision only while it has not moved. A
-- sequence rather than a row: nextval never waits for another writer's lock. Expand only:
-- replicas of an older version never move it, so the token proxy's decision cache must not be
-- relied on until every replica runs this version (docs/token-proxy.md, "Cost").
CREATE SEQUENCE IF NOT EXISTS store_revision;
SELECT nextval('store_revision');
