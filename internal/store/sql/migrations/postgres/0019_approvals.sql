-- Approval requests (OpenID CIBA Core 1.0, docs/approvals.md): an agent asks a person to approve
-- something and polls for the answer. Found by the hash of the auth_req_id the agent holds, and
-- by id from the person's account page. A request is deleted when the agent redeems the answer
-- (once), and collected after it expires.
CREATE TABLE approval_requests (
    hash                  BYTEA NOT NULL PRIMARY KEY,
    id                    TEXT NOT NULL UNIQUE,
    project               TEXT NOT NULL,
    client_id             TEXT NOT NULL,
    subject               TEXT NOT NULL,
    scopes                TEXT NOT NULL,
    binding_message       TEXT NOT NULL,
    authorization_details TEXT NOT NULL,
    delivery_mode         TEXT NOT NULL,
    notification_token    BYTEA,
    status                TEXT NOT NULL,
    interval_ns           BIGINT NOT NULL,
    polled_at             BIGINT NOT NULL,
    created_at            BIGINT NOT NULL,
    expires_at            BIGINT NOT NULL,
    decided_at            BIGINT NOT NULL
);
CREATE INDEX approval_requests_subject ON approval_requests (project, subject, created_at);
CREATE INDEX approval_requests_expires ON approval_requests (expires_at);
