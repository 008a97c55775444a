-- Rate limits shared by every replica (internal/ratelimit): one token bucket per limiter and
-- key, the key a hash (it holds client addresses and typed names). A bucket may be forgotten
-- once it is full again (expires_at); the garbage collector deletes those.
CREATE TABLE rate_buckets (
    key        BYTEA PRIMARY KEY,
    tokens     DOUBLE PRECISION NOT NULL,
    last       BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX rate_buckets_expires ON rate_buckets (expires_at);
