package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const codeCols = `hash, project, client_id, subject, redirect_uri, scopes, resource, code_challenge,
code_challenge_method, nonce, auth_time, expires_at, created_at, dpop_jkt, authorization_details`

var (
	qCreateCode = sqlText(`INSERT INTO auth_codes (` + codeCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	// One statement decides the race: whichever UPDATE sets used_at first gets the row back.
	qRedeemCode = sqlText(`UPDATE auth_codes SET used_at = ? WHERE hash = ? AND used_at IS NULL AND expires_at > ?
RETURNING ` + codeCols)
	qGetCode = sqlText(`SELECT ` + codeCols + `, used_at FROM auth_codes WHERE hash = ?`)
	// The mark a replay leaves (migration 0023); an unknown code marks nothing.
	qMarkCodeReplayed = sqlText(`UPDATE auth_codes SET replayed_at = ? WHERE hash = ? AND replayed_at IS NULL`)
	qCodeReplayed     = sqlText(`SELECT replayed_at IS NOT NULL FROM auth_codes WHERE hash = ?`)
)

func scanCode(c *store.AuthCode, used *sql.NullInt64) func(scanner) error {
	return func(r scanner) error {
		var scopes, resource string
		var auth, expires, created int64
		dest := []any{&c.Hash, &c.Project, &c.ClientID, &c.Subject, &c.RedirectURI, &scopes, &resource,
			&c.CodeChallenge, &c.CodeChallengeMethod, &c.Nonce, &auth, &expires, &created, &c.DPoPJKT, &c.AuthorizationDetails}
		if used != nil {
			dest = append(dest, used)
		}
		if err := r.Scan(dest...); err != nil {
			return err
		}
		var err error
		if c.Scopes, err = fromList(scopes); err != nil {
			return err
		}
		if c.Resource, err = fromList(resource); err != nil {
			return err
		}
		c.AuthTime, c.ExpiresAt, c.CreatedAt = fromNS(auth), fromNS(expires), fromNS(created)
		return nil
	}
}

func (s *Store) CreateAuthCode(ctx context.Context, c store.AuthCode) (err error) {
	defer s.observe(ctx, "CreateAuthCode", time.Now(), &err)
	_, err = s.wexec(ctx, qCreateCode, c.Hash, c.Project, c.ClientID, c.Subject, c.RedirectURI,
		list(c.Scopes), list(c.Resource), c.CodeChallenge, c.CodeChallengeMethod, c.Nonce,
		ns(c.AuthTime), ns(c.ExpiresAt), ns(c.CreatedAt), c.DPoPJKT, c.AuthorizationDetails)
	return conflict(err)
}

// RedeemAuthCode marks the code used, exactly once. A code that was already redeemed comes
// back with ErrConflict even after it expired (until garbage collection removes it), so a
// replay always lets the caller revoke what the first redemption issued. With check, the code
// is marked used only if check accepts it: a failed check leaves the code as it was and returns
// it with check's error.
func (s *Store) RedeemAuthCode(ctx context.Context, hash []byte, now time.Time, check func(store.AuthCode) error) (store.AuthCode, error) {
	// A code the caller's check refused (a wrong verifier) is the client's mistake, answered
	// correctly: it is observed as a success, not as a store error.
	var observed error
	defer s.observe(ctx, "RedeemAuthCode", time.Now(), &observed)
	c, refused, err := s.redeemAuthCode(ctx, hash, now, check)
	if !refused {
		observed = err
	}
	return c, err
}

// redeemAuthCode is RedeemAuthCode; refused says the error is check's.
func (s *Store) redeemAuthCode(ctx context.Context, hash []byte, now time.Time, check func(store.AuthCode) error) (c store.AuthCode, refused bool, err error) {
	// Spending a code withdraws nothing (a reused code's tokens are revoked by RevokeByCode).
	if check == nil {
		err = s.wrowQuiet(ctx, scanCode(&c, nil), qRedeemCode, ns(now), hash, ns(now))
	} else {
		// Read, check, then spend: a code's fields never change once stored, so check judges
		// exactly what the spend returns, and the conditional UPDATE alone settles a race
		// (whoever sets used_at first). Two round trips to PostgreSQL instead of a
		// transaction's three, and a refused check writes nothing (decision 0045).
		var used sql.NullInt64
		if err := s.reader().row(ctx, scanCode(&c, &used), qGetCode, hash); err != nil {
			return store.AuthCode{}, false, err
		}
		switch {
		case used.Valid:
			return c, false, store.ErrConflict
		case ns(c.ExpiresAt) <= ns(now):
			return store.AuthCode{}, false, store.ErrNotFound
		}
		if checkErr := check(c); checkErr != nil {
			return c, true, checkErr
		}
		c = store.AuthCode{}
		err = s.wrowQuiet(ctx, scanCode(&c, nil), qRedeemCode, ns(now), hash, ns(now))
	}
	if !errors.Is(err, store.ErrNotFound) {
		return c, false, err
	}
	c = store.AuthCode{}
	var used sql.NullInt64
	if err := s.reader().row(ctx, scanCode(&c, &used), qGetCode, hash); err != nil {
		return store.AuthCode{}, false, err
	}
	if used.Valid {
		return c, false, store.ErrConflict
	}
	return store.AuthCode{}, false, store.ErrNotFound
}

// AuthCodeReplayed reads the replay mark. The read pool sees every commit made before the
// statement starts (SQLite's WAL readers; PostgreSQL's read committed), which is all the
// ordering argument in store.AuthCodes needs.
func (s *Store) AuthCodeReplayed(ctx context.Context, hash []byte) (replayed bool, err error) {
	defer s.observe(ctx, "AuthCodeReplayed", time.Now(), &err)
	err = s.reader().row(ctx, func(r scanner) error { return r.Scan(&replayed) }, qCodeReplayed, hash)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return replayed, err
}
