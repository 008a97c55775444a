package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

var (
	qFindPerson     = sqlText(`SELECT ` + personCols + ` FROM people WHERE project = ? AND source = ? AND source_subject = ?`)
	qUseAssertionID = sqlText(`INSERT INTO assertion_ids (project, issuer, jti, expires_at) VALUES (?, ?, ?, ?)`)
)

// FindPerson reads the person by source identity without creating one.
func (s *Store) FindPerson(ctx context.Context, project, source, sourceSubject string) (_ store.Person, err error) {
	defer s.observe(ctx, "FindPerson", time.Now(), &err)
	var out store.Person
	err = s.reader().row(ctx, scanPerson(&out), qFindPerson, project, source, sourceSubject)
	return out, err
}

// UseAssertionID records a redeemed assertion; the primary key makes a second use of the same
// (project, issuer, jti) ErrConflict, on every replica at once.
func (s *Store) UseAssertionID(ctx context.Context, project, issuer, jti string, expiresAt time.Time) (err error) {
	defer s.observe(ctx, "UseAssertionID", time.Now(), &err)
	_, err = s.wexec(ctx, qUseAssertionID, project, issuer, jti, ns(expiresAt))
	return conflict(err)
}
