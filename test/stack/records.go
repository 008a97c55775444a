package stack

import (
	"context"
	"database/sql"
	"os"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events/audittest"
	"latchkey.dev/latchkey/internal/store"
)

// Holder is the first replica's compiled configuration.
func (s *Stack) Holder() *config.Holder { return s.Replicas[0].Holder }

// Person returns the stored person with that email (they exist once they have signed in).
func (s *Stack) Person(email string) store.Person {
	s.T.Helper()
	db := s.rawDB()
	defer db.Close()
	var id string
	if err := db.QueryRow(`SELECT id FROM people WHERE project = ? AND email = ?`, ProjectKey, email).Scan(&id); err != nil {
		s.T.Fatalf("person %s: %v", email, err)
	}
	p, err := s.Admin.GetPerson(context.Background(), ProjectKey, id)
	if err != nil {
		s.T.Fatal(err)
	}
	return p
}

// Connections lists a person's connections.
func (s *Stack) Connections(email string) []store.Connection {
	s.T.Helper()
	cs, err := s.Admin.ListConnections(context.Background(), ProjectKey, s.Person(email).ID)
	if err != nil {
		s.T.Fatal(err)
	}
	return cs
}

// CountRows counts the rows of a table, straight from the database file.
func (s *Stack) CountRows(table string) int {
	s.T.Helper()
	db := s.rawDB()
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
		s.T.Fatal(err)
	}
	return n
}

// ConnectionBytes is every stored connection row's token and name columns, as the database
// holds them, for "the token is not stored in the clear" checks.
func (s *Stack) ConnectionBytes() []byte {
	s.T.Helper()
	db := s.rawDB()
	defer db.Close()
	var out []byte
	rows, err := db.Query(`SELECT coalesce(access_token, x''), coalesce(refresh_token, x''), account_name FROM connections`)
	if err != nil {
		s.T.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var at, rt []byte
		var name string
		if err := rows.Scan(&at, &rt, &name); err != nil {
			s.T.Fatal(err)
		}
		out = append(append(append(out, at...), rt...), name...)
	}
	return out
}

// FileBytes is the database file and its write-ahead log, byte for byte.
func (s *Stack) FileBytes() []byte {
	s.T.Helper()
	if s.DBPath == "" {
		s.T.Fatal("stack: FileBytes reads a SQLite database; this stack runs on " + s.dsn)
	}
	var out []byte
	for _, f := range []string{s.DBPath, s.DBPath + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			s.T.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

// rawDB opens the SQLite file read-only, beside the stores, for what no store method reads.
func (s *Stack) rawDB() *sql.DB {
	if s.DBPath == "" {
		s.T.Fatal("stack: reading rows straight from the database needs SQLite; this stack runs on " + s.dsn)
	}
	db, err := sql.Open("sqlite", s.DBPath+"?_busy_timeout=10000&_query_only=1")
	if err != nil {
		s.T.Fatal(err)
	}
	return db
}

// Audit returns the project's audit records, newest first, those the replicas still queue
// (written behind, internal/store/sql/auditqueue.go) included.
func (s *Stack) Audit() []store.AuditRecord {
	s.T.Helper()
	s.flushAudit()
	recs, err := s.Store().ListAudit(context.Background(), ProjectKey, 1000)
	if err != nil {
		s.T.Fatal(err)
	}
	return recs
}

// AuditActions lists the actions of the audit records, oldest first.
func (s *Stack) AuditActions() []string {
	recs := s.Audit()
	out := make([]string, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- {
		out = append(out, recs[i].Action)
	}
	return out
}

// Trail delivers what is pending and checks that each action is in the audit log and was
// received by AuditSink, verified (internal/events/audittest); it needs Options.Audit. It
// returns the newest record of each action.
func (s *Stack) Trail(actions ...string) map[string]store.AuditRecord {
	s.T.Helper()
	if s.AuditSink == nil {
		s.T.Fatal("stack: Trail needs Options.Audit")
	}
	s.flushAudit()
	return audittest.Trail(s.T, s.Store(), s.Holder(), s.Clock.Now, s.AuditSink, ProjectKey, actions...)
}

// flushAudit has every replica write the audit records it queues: a store lists its own
// queued records with the stored ones, never another connection's.
func (s *Stack) flushAudit() {
	s.T.Helper()
	for _, r := range s.Replicas[1:] {
		if _, err := r.Store.ListAudit(context.Background(), ProjectKey, 1); err != nil {
			s.T.Fatal(err)
		}
	}
}
