-- Rate limits shared by every replica (internal/ratelimit): one token bucket per limiter and
-- key, the key a hash (it holds client addresses and typed names). A bucket may be forgotten
-- once it is full again (expires_at); the garbage collector deletes those.
CREATE TABLE rate_buckets (
    key        BLOB PRIMARY KEY,
    tokens     REAL NOT NULL,
    last       INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX rate_buckets_expires ON rate_buckets (expires_at);
