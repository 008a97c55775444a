-- Audit retention (--audit-retention) deletes relayed records older than a cutoff; this index
-- finds them without reading the table. Records arrive in time order, so new entries go to the
-- index's right edge, as tokens_expires' do. On a large existing audit table, build it
-- beforehand without blocking writes (PostgreSQL: CREATE INDEX CONCURRENTLY IF NOT EXISTS
-- audit_time ON audit (time)); this migration then keeps it.
CREATE INDEX IF NOT EXISTS audit_time ON audit (time);
