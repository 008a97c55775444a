-- Clients a person blocked from asking them for approvals (docs/approvals.md): a blocked
-- client's request is refused with access_denied at once and nobody is notified. Rows stay
-- until the person unblocks the client.
CREATE TABLE approval_blocks (
    project    TEXT NOT NULL,
    subject    TEXT NOT NULL,
    client_id  TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project, subject, client_id)
);
