package sqlstore

import (
	"context"
	"errors"
	"slices"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// People who leave (docs/leavers.md): ending a person's sign-ins, back-channel logout, and the
// state of re-checking a person at the project's OpenID provider.

const personCheckCols = `project, subject, key_id, refresh_token, checked_at, tried_at`

var (
	qEndSessions    = sqlText(`DELETE FROM sessions WHERE project = ? AND subject = ?`)
	qRevokePerson   = sqlText(revokeSet + `project = ? AND subject = ?` + revokeReturning)
	qEndPersonCheck = sqlText(`DELETE FROM person_checks WHERE project = ? AND subject = ?`)
	qEndPasskeys    = sqlText(`DELETE FROM passkeys WHERE project = ? AND subject = ?`)
	// Only enrolments name a person; a sign-in ceremony names nobody until it is answered.
	qEndCeremonies = sqlText(`DELETE FROM passkey_ceremonies WHERE project = ? AND subject = ?`)
	qEndCodes      = sqlText(`DELETE FROM auth_codes WHERE project = ? AND subject = ?`)

	qRememberLogout = sqlText(`INSERT INTO logout_tokens (project, jti, expires_at) VALUES (?, ?, ?)`)
	qPersonBySource = sqlText(`SELECT id FROM people WHERE project = ? AND source = 'oidc' AND source_subject = ?`)
	qPeopleBySID    = sqlText(`SELECT DISTINCT subject FROM sessions WHERE project = ? AND upstream_sid = ? AND upstream_sid <> ''`)

	qSavePersonCheck = sqlText(`INSERT INTO person_checks (` + personCheckCols + `) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (project, subject) DO UPDATE SET key_id = excluded.key_id, refresh_token = excluded.refresh_token,
checked_at = excluded.checked_at, tried_at = excluded.tried_at`)
	qLockPersonCheck   = sqlText(`SELECT ` + personCheckCols + ` FROM person_checks WHERE project = ? AND subject = ?` + forUpdate)
	qUpdatePersonCheck = sqlText(`UPDATE person_checks SET key_id = ?, refresh_token = ?, checked_at = ?, tried_at = ?
WHERE project = ? AND subject = ?`)
)

// endWaysIn is what every ending of a person's access does besides its own part, inside x:
// it records now as the person's AccessEndedAt (first, so that on PostgreSQL the person's row
// is locked before anything else, in the order FinishConnection and EndPersonAccess take it)
// and deletes what would let the person or an agent in again without a new sign-in at the
// source: passkeys (a passkey sign-in asks the project, not the provider that let the person
// go), pending passkey enrolments, and authorization codes not yet redeemed.
func endWaysIn(ctx context.Context, x q, project, subject string, now time.Time) (passkeys, codes int64, err error) {
	if _, err = x.exec(ctx, qMarkAccessEnded, ns(now), project, subject); err != nil {
		return 0, 0, err
	}
	if passkeys, err = x.execN(ctx, qEndPasskeys, project, subject); err != nil {
		return 0, 0, err
	}
	if _, err = x.exec(ctx, qEndCeremonies, project, subject); err != nil {
		return 0, 0, err
	}
	if codes, err = x.execN(ctx, qEndCodes, project, subject); err != nil {
		return 0, 0, err
	}
	return passkeys, codes, nil
}

// endSignIns ends one person's sign-ins inside x and adds what it ended to e.
func endSignIns(ctx context.Context, x q, project, subject string, now time.Time, e *store.Ended) error {
	keys, codes, err := endWaysIn(ctx, x, project, subject, now)
	if err != nil {
		return err
	}
	e.Passkeys += keys
	e.Codes += codes
	n, err := x.execN(ctx, qEndSessions, project, subject)
	if err != nil {
		return err
	}
	e.Sessions += n
	live, err := revoke(ctx, x, qRevokePerson, now, project, subject)
	if err != nil {
		return err
	}
	e.Tokens += sum(live)
	if n, err = x.execN(ctx, qEndCallbacks, project, subject); err != nil {
		return err
	}
	e.Callbacks += n
	if _, err := x.exec(ctx, qEndPersonCheck, project, subject); err != nil {
		return err
	}
	e.Subjects = append(e.Subjects, subject)
	return nil
}

func (s *Store) EndSignIns(ctx context.Context, project, subject string, now time.Time) (_ store.Ended, err error) {
	defer s.observe(ctx, "EndSignIns", time.Now(), &err)
	var out store.Ended
	err = s.tx(ctx, func(x q) error {
		out = store.Ended{}
		return endSignIns(ctx, x, project, subject, now, &out)
	})
	if err != nil {
		return store.Ended{}, err
	}
	return out, nil
}

// Logout remembers the token id first: a replay fails on the primary key before anything is
// ended, and the id is only kept if the sign-ins it names were ended too.
func (s *Store) Logout(ctx context.Context, l store.Logout) (_ store.Ended, err error) {
	defer s.observe(ctx, "Logout", time.Now(), &err)
	if l.JTI == "" || (l.SourceSubject == "" && l.SID == "") {
		return store.Ended{}, errors.New("sqlstore: Logout needs a JTI and a SourceSubject or SID")
	}
	var out store.Ended
	err = s.tx(ctx, func(x q) error {
		out = store.Ended{}
		if _, err := x.exec(ctx, qRememberLogout, l.Project, l.JTI, ns(l.Until)); err != nil {
			return conflict(err)
		}
		var subjects []string
		scan := func(r scanner) error {
			var id string
			if err := r.Scan(&id); err != nil {
				return err
			}
			subjects = append(subjects, id)
			return nil
		}
		var err error
		if l.SourceSubject != "" {
			err = x.each(ctx, scan, qPersonBySource, l.Project, l.SourceSubject)
		} else {
			err = x.each(ctx, scan, qPeopleBySID, l.Project, l.SID)
		}
		if err != nil {
			return err
		}
		slices.Sort(subjects)
		for _, subject := range slices.Compact(subjects) {
			if err := endSignIns(ctx, x, l.Project, subject, l.Now, &out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.Ended{}, err
	}
	return out, nil
}

func (s *Store) SavePersonCheck(ctx context.Context, c store.PersonCheck) (err error) {
	defer s.observe(ctx, "SavePersonCheck", time.Now(), &err)
	_, err = s.wexec(ctx, qSavePersonCheck, c.Project, c.Subject, c.KeyID, c.RefreshToken, ns(c.CheckedAt), ns(c.TriedAt))
	return err
}

func (s *Store) UpdatePersonCheck(ctx context.Context, project, subject string, fn func(store.PersonCheck) (store.PersonCheck, error)) (_ store.PersonCheck, err error) {
	defer s.observe(ctx, "UpdatePersonCheck", time.Now(), &err)
	var out store.PersonCheck
	err = s.tx(ctx, func(x q) error {
		out = store.PersonCheck{}
		err := x.row(ctx, func(r scanner) error {
			var checked, tried int64
			if err := r.Scan(&out.Project, &out.Subject, &out.KeyID, &out.RefreshToken, &checked, &tried); err != nil {
				return err
			}
			out.CheckedAt, out.TriedAt = fromNS(checked), fromNS(tried)
			return nil
		}, qLockPersonCheck, project, subject)
		if err != nil {
			return err
		}
		// On fn's error the row stays and out is what was read: the caller gets both.
		next, err := fn(out)
		if err != nil {
			return err
		}
		next.Project, next.Subject = out.Project, out.Subject
		if _, err := x.exec(ctx, qUpdatePersonCheck, next.KeyID, next.RefreshToken, ns(next.CheckedAt), ns(next.TriedAt),
			project, subject); err != nil {
			return err
		}
		out = next
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.PersonCheck{}, err
	}
	return out, err
}
