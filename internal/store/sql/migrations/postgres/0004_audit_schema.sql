-- One schema for every audit record (docs/audit.md): the client and Connector involved, the
-- outcome and its reason code. Records written before this have them empty.
ALTER TABLE audit ADD COLUMN client_id TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN connector TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN outcome   TEXT NOT NULL DEFAULT '';
ALTER TABLE audit ADD COLUMN reason    TEXT NOT NULL DEFAULT '';
-- pending = 1 until the record has been copied into the event outbox for the Project's sinks
-- (RelayAudit). Records written before this are not sent: they predate the sinks receiving
-- every record.
ALTER TABLE audit ADD COLUMN pending   SMALLINT NOT NULL DEFAULT 0;
CREATE INDEX audit_pending ON audit (id) WHERE pending = 1;
