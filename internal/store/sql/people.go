package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const personCols = `project, id, source, source_subject, email, name, created_at, access_ended_at`

var (
	// A person is upserted at every sign-in, so the upsert records the sign-in time too.
	qUpsertPerson = sqlText(`INSERT INTO people (project, id, source, source_subject, email, name, created_at, signed_in_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (project, source, source_subject) DO UPDATE SET email = excluded.email, name = excluded.name,
signed_in_at = excluded.signed_in_at
RETURNING ` + personCols)
	qGetPerson  = sqlText(`SELECT ` + personCols + ` FROM people WHERE project = ? AND id = ?`)
	qLockPerson = sqlText(`SELECT ` + personCols + ` FROM people WHERE project = ? AND id = ?` + forUpdate)
	qFindPerson = sqlText(`SELECT ` + personCols + ` FROM people WHERE project = ? AND source = ? AND source_subject = ?`)
)

func scanPerson(p *store.Person) func(scanner) error {
	return func(r scanner) error {
		var created, ended int64
		if err := r.Scan(&p.Project, &p.ID, &p.Source, &p.SourceSubject, &p.Email, &p.Name, &created, &ended); err != nil {
			return err
		}
		p.CreatedAt, p.AccessEndedAt = fromNS(created), fromNS(ended)
		return nil
	}
}

// UpsertPerson finds the person by source identity or creates them. A new person whose ID is
// already taken in the project is ErrConflict.
func (s *Store) UpsertPerson(ctx context.Context, p store.Person) (_ store.Person, err error) {
	defer s.observe(ctx, "UpsertPerson", time.Now(), &err)
	var out store.Person
	err = s.wrow(ctx, scanPerson(&out), qUpsertPerson,
		p.Project, p.ID, p.Source, p.SourceSubject, p.Email, p.Name, ns(p.CreatedAt), ns(p.CreatedAt))
	return out, conflict(err)
}

func (s *Store) GetPerson(ctx context.Context, project, id string) (_ store.Person, err error) {
	defer s.observe(ctx, "GetPerson", time.Now(), &err)
	var out store.Person
	err = s.reader().row(ctx, scanPerson(&out), qGetPerson, project, id)
	return out, err
}

// FindPerson reads the person by source identity without creating one.
func (s *Store) FindPerson(ctx context.Context, project, source, sourceSubject string) (_ store.Person, err error) {
	defer s.observe(ctx, "FindPerson", time.Now(), &err)
	var out store.Person
	err = s.reader().row(ctx, scanPerson(&out), qFindPerson, project, source, sourceSubject)
	return out, err
}

// ---------------------------------------------------------------------------------------------
// Sessions

const sessionCols = `id_hash, project, subject, auth_time, created_at, expires_at, upstream_sid, method`

var (
	qCreateSession = sqlText(`INSERT INTO sessions (` + sessionCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	qGetSession    = sqlText(`SELECT ` + sessionCols + ` FROM sessions WHERE id_hash = ? AND expires_at > ?`)
	qDeleteSession = sqlText(`DELETE FROM sessions WHERE id_hash = ?`)
)

func (s *Store) CreateSession(ctx context.Context, x store.Session) (err error) {
	defer s.observe(ctx, "CreateSession", time.Now(), &err)
	_, err = s.wexec(ctx, qCreateSession,
		x.IDHash, x.Project, x.Subject, ns(x.AuthTime), ns(x.CreatedAt), ns(x.ExpiresAt), x.UpstreamSID, x.Method)
	return conflict(err)
}

func (s *Store) GetSession(ctx context.Context, idHash []byte, now time.Time) (_ store.Session, err error) {
	defer s.observe(ctx, "GetSession", time.Now(), &err)
	var out store.Session
	err = s.reader().row(ctx, func(r scanner) error {
		var auth, created, expires int64
		if err := r.Scan(&out.IDHash, &out.Project, &out.Subject, &auth, &created, &expires, &out.UpstreamSID, &out.Method); err != nil {
			return err
		}
		out.AuthTime, out.CreatedAt, out.ExpiresAt = fromNS(auth), fromNS(created), fromNS(expires)
		return nil
	}, qGetSession, idHash, ns(now))
	return out, err
}

// DeleteSession removes the session; ErrNotFound if there was none.
func (s *Store) DeleteSession(ctx context.Context, idHash []byte) (err error) {
	defer s.observe(ctx, "DeleteSession", time.Now(), &err)
	return s.wexecOne(ctx, qDeleteSession, idHash)
}
