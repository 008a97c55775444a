package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// A token is live when it is neither revoked nor rotated nor expired. Revocations also mark
// rotated tokens revoked (so presenting one later is plainly inactive) but count only live
// ones: those are what a person or an admin would call "connected".

const tokenCols = `hash, kind, project, client_id, subject, scopes, audience, family_id, generation, code_hash,
auth_time, issued_at, expires_at, revoked_at, rotated_at, jkt, authorization_details, delegation`

// revokeSet starts every revocation; the WHERE clause continues it. Each revocation returns the
// rows it ended so the caller can count live ones per client without a second query.
const revokeSet = `UPDATE tokens SET revoked_at = ?, sealed = NULL, replay_until = NULL
WHERE revoked_at IS NULL AND expires_at > ? AND `

const revokeReturning = ` RETURNING client_id, rotated_at`

var (
	qGetToken  = sqlText(`SELECT ` + tokenCols + ` FROM tokens WHERE hash = ?`)
	qLockToken = sqlText(`SELECT ` + tokenCols + `, sealed FROM tokens WHERE hash = ?` + forUpdate)
	// The row lock (PostgreSQL) or the write transaction (SQLite) already serialises rotations;
	// the conditions make a lost race visible instead of silent should that ever change.
	qRetire = sqlText(`UPDATE tokens SET rotated_at = ?, sealed = ?, replay_until = ?
WHERE hash = ? AND rotated_at IS NULL AND revoked_at IS NULL`)
	qSuccessors = sqlText(`SELECT expires_at, revoked_at, rotated_at FROM tokens
WHERE family_id = ? AND generation = ? AND kind = 'refresh'`)

	qRevokeHash   = sqlText(revokeSet + `hash = ?` + revokeReturning)
	qRevokeFamily = sqlText(revokeSet + `family_id = ?` + revokeReturning)
	qRevokeByCode = sqlText(revokeSet + `family_id IN (SELECT family_id FROM tokens WHERE code_hash = ?)` + revokeReturning)
	qRevokeClient = sqlText(revokeSet + `project = ? AND client_id = ?` + revokeReturning)
	qRevokeHolder = sqlText(revokeSet + `project = ? AND client_id = ? AND subject = ?` + revokeReturning)

	qCountLive = sqlText(`SELECT client_id, COUNT(*) FROM tokens
WHERE project = ? AND revoked_at IS NULL AND rotated_at IS NULL AND expires_at > ? GROUP BY client_id`)
)

func scanToken(t *store.Token, sealed *[]byte) func(scanner) error {
	return func(r scanner) error {
		var kind, scopes, audience, deleg string
		var gen, auth, issued, expires int64
		var revoked, rotated sql.NullInt64
		dest := []any{&t.Hash, &kind, &t.Project, &t.ClientID, &t.Subject, &scopes, &audience, &t.FamilyID, &gen,
			&t.CodeHash, &auth, &issued, &expires, &revoked, &rotated, &t.JKT, &t.AuthorizationDetails, &deleg}
		if sealed != nil {
			dest = append(dest, sealed)
		}
		if err := r.Scan(dest...); err != nil {
			return err
		}
		var err error
		if t.Scopes, err = fromList(scopes); err != nil {
			return err
		}
		if t.Audience, err = fromList(audience); err != nil {
			return err
		}
		if t.Act, t.MayAct, err = fromDelegation(deleg); err != nil {
			return err
		}
		t.Kind, t.Generation = store.TokenKind(kind), int(gen)
		t.AuthTime, t.IssuedAt, t.ExpiresAt = fromNS(auth), fromNS(issued), fromNS(expires)
		t.RevokedAt, t.RotatedAt = fromNullNS(revoked), fromNullNS(rotated)
		return nil
	}
}

// qInsertTokens[n] inserts n tokens in one statement: an issuance (usually an access and a
// refresh token) is one round trip and, being one statement, atomic without a transaction.
var qInsertTokens = func() (qs [5]string) {
	for n := 1; n < len(qs); n++ {
		qs[n] = sqlText(`INSERT INTO tokens (` + tokenCols + `) VALUES ` +
			strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), `, n), ", "))
	}
	return qs
}()

// insertTokens stores tokens, len(qInsertTokens)-1 per statement.
func insertTokens(ctx context.Context, x q, tokens []store.Token) error {
	for len(tokens) > 0 {
		n := min(len(tokens), len(qInsertTokens)-1)
		args := make([]any, 0, 18*n)
		for _, t := range tokens[:n] {
			deleg, err := delegation(t)
			if err != nil {
				return err
			}
			args = append(args, t.Hash, string(t.Kind), t.Project, t.ClientID, t.Subject, list(t.Scopes),
				list(t.Audience), t.FamilyID, int64(t.Generation), blob(t.CodeHash), ns(t.AuthTime), ns(t.IssuedAt),
				ns(t.ExpiresAt), nullNS(t.RevokedAt), nullNS(t.RotatedAt), t.JKT, t.AuthorizationDetails, deleg)
		}
		if _, err := x.exec(ctx, qInsertTokens[n], args...); err != nil {
			return conflict(err)
		}
		tokens = tokens[n:]
	}
	return nil
}

// revoke runs one of the qRevoke statements (args continue after revoked_at and the expiry
// bound) and counts, per client, the live tokens it ended.
func revoke(ctx context.Context, x q, query string, now time.Time, args ...any) (map[string]int64, error) {
	live := map[string]int64{}
	err := x.each(ctx, func(r scanner) error {
		var client string
		var rotated sql.NullInt64
		if err := r.Scan(&client, &rotated); err != nil {
			return err
		}
		if !rotated.Valid {
			live[client]++
		}
		return nil
	}, query, append([]any{ns(now), ns(now)}, args...)...)
	if err != nil {
		return nil, err
	}
	return live, nil
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// CreateTokens stores the tokens of one issuance atomically (one statement for up to four
// tokens, else one transaction); a duplicate hash is ErrConflict and stores none of them.
func (s *Store) CreateTokens(ctx context.Context, tokens ...store.Token) (err error) {
	defer s.observe(ctx, "CreateTokens", time.Now(), &err)
	if len(tokens) == 0 {
		return nil
	}
	if len(tokens) < len(qInsertTokens) {
		return s.writeQuiet(ctx, func(x q) error { return insertTokens(ctx, x, tokens) })
	}
	return s.txQuiet(ctx, func(x q) error { return insertTokens(ctx, x, tokens) })
}

func (s *Store) GetToken(ctx context.Context, hash []byte) (_ store.Token, err error) {
	defer s.observe(ctx, "GetToken", time.Now(), &err)
	var t store.Token
	err = s.reader().row(ctx, scanToken(&t, nil), qGetToken, hash)
	return t, err
}

// qTokenHolder is qGetToken joined with qGetPerson; the person's columns are coalesced, so a
// token without a (stored) person scans without NULLs.
var qTokenHolder = sqlText(`SELECT t.hash, t.kind, t.project, t.client_id, t.subject, t.scopes, t.audience,
t.family_id, t.generation, t.code_hash, t.auth_time, t.issued_at, t.expires_at, t.revoked_at, t.rotated_at, t.jkt, t.authorization_details, t.delegation,
COALESCE(p.project, ''), COALESCE(p.id, ''), COALESCE(p.source, ''), COALESCE(p.source_subject, ''),
COALESCE(p.email, ''), COALESCE(p.name, ''), COALESCE(p.created_at, 0), COALESCE(p.access_ended_at, 0)
FROM tokens t LEFT JOIN people p ON p.project = t.project AND p.id = t.subject AND t.subject <> ''
WHERE t.hash = ?`)

func (s *Store) TokenHolder(ctx context.Context, hash []byte) (_ store.Token, _ store.Person, _ bool, err error) {
	defer s.observe(ctx, "TokenHolder", time.Now(), &err)
	var (
		t store.Token
		p store.Person
	)
	err = s.reader().row(ctx, func(r scanner) error {
		return scanToken(&t, nil)(scanFunc(func(tok ...any) error {
			return scanPerson(&p)(scanFunc(func(pe ...any) error { return r.Scan(append(tok, pe...)...) }))
		}))
	}, qTokenHolder, hash)
	if err != nil {
		return store.Token{}, store.Person{}, false, err
	}
	if p.ID == "" {
		return t, store.Person{}, false, nil
	}
	return t, p, true, nil
}

// RotateRefreshToken implements refresh-token rotation with reuse detection (decision 0008) in one
// transaction that holds the old token's row lock (PostgreSQL) or the write lock (SQLite), so
// any number of concurrent presentations of one token end with exactly one successor.
//
// The new tokens inherit what the old one fixes: family, generation (old+1), project, client,
// subject, code hash and auth time are filled in when unset and must agree when set.
func (s *Store) RotateRefreshToken(ctx context.Context, r store.RotateRequest) (_ store.Rotation, err error) {
	defer s.observe(ctx, "RotateRefreshToken", time.Now(), &err)
	if s.postgres() {
		out, done, err := s.rotateInOne(ctx, r)
		if done {
			return out, err
		}
	}
	var out store.Rotation
	// Only a reuse withdraws anything (the holder's tokens are revoked): the revision moves
	// then, and stays for a rotation or a replay.
	defer func() {
		if out.Outcome == store.OutcomeReuseDetected || err != nil {
			err = s.changed(ctx, err)
		}
	}()
	err = s.txQuiet(ctx, func(x q) error {
		out = store.Rotation{}
		var old store.Token
		var sealed []byte
		if err := x.row(ctx, scanToken(&old, &sealed), qLockToken, r.OldHash); err != nil {
			return err
		}
		if old.Kind != store.RefreshToken {
			return store.ErrNotFound
		}
		out.Old = old
		now := r.Now

		if !old.Active(now) {
			out.Outcome = store.OutcomeInactive
			return nil
		}

		if old.RotatedAt == nil {
			next, err := successors(old, r.New)
			if err != nil {
				return err
			}
			n, err := x.execN(ctx, qRetire, ns(now), blob(r.Sealed), ns(now.Add(r.Grace)), old.Hash)
			if err != nil {
				return err
			}
			if n != 1 {
				return errRace
			}
			if err := insertTokens(ctx, x, next); err != nil {
				return err
			}
			out.Outcome = store.OutcomeRotated
			out.Old.RotatedAt = &now
			return nil
		}

		if sealed != nil && now.Before(old.RotatedAt.Add(r.Grace)) {
			head, err := liveSuccessor(ctx, x, old, now)
			if err != nil {
				return err
			}
			if head {
				out.Outcome = store.OutcomeGraceReplay
				out.Replay = sealed
				return nil
			}
		}

		live, err := revoke(ctx, x, qRevokeHolder, now, old.Project, old.ClientID, old.Subject)
		if err != nil {
			return err
		}
		out.Outcome = store.OutcomeReuseDetected
		out.Revoked = live[old.ClientID]
		out.Old.RevokedAt = &now
		return nil
	})
	return out, err
}

// qRotate[n][nilCode] retires a refresh token and stores its n successors in one statement
// (PostgreSQL only: SQLite has no data-modifying CTEs). The UPDATE finds the old token only if
// it is a live, unrotated refresh token that agrees with whatever the successors set of its
// family, project, client, subject, generation and code hash; the INSERT takes those from the
// row the UPDATE returned, and the auth time too where a successor leaves it unset, so it
// stores exactly what successors would, and nothing when the UPDATE found no row.
var qRotate = func() (qs [5][2]string) {
	row := `(?::bytea, ?::text, ?::text, ?::text, ?::bigint, ?::bigint, ?::bigint, ?::bigint, ?::bigint, ?::text, ?::text, ?::text)`
	for n := 1; n < len(qs); n++ {
		for nilCode := range 2 {
			code := ` AND code_hash = ?`
			if nilCode == 1 {
				code = ``
			}
			qs[n][nilCode] = `WITH r AS (UPDATE tokens SET rotated_at = ?, sealed = ?, replay_until = ?
WHERE hash = ? AND kind = 'refresh' AND revoked_at IS NULL AND rotated_at IS NULL AND expires_at > ?
AND project = COALESCE(NULLIF(?, ''), project) AND client_id = COALESCE(NULLIF(?, ''), client_id)
AND subject = COALESCE(NULLIF(?, ''), subject) AND family_id = COALESCE(NULLIF(?, ''), family_id)
AND (?::bigint = 0 OR generation = ?::bigint - 1)` + code + `
RETURNING ` + tokenCols + `),
i AS (INSERT INTO tokens (` + tokenCols + `)
SELECT v.hash, v.kind, r.project, r.client_id, r.subject, v.scopes, v.audience, r.family_id, r.generation + 1,
r.code_hash, CASE WHEN v.auth_time = 0 THEN r.auth_time ELSE v.auth_time END, v.issued_at, v.expires_at,
v.revoked_at, v.rotated_at, v.jkt, v.authorization_details, v.delegation
FROM r, (VALUES ` + strings.TrimSuffix(strings.Repeat(row+`, `, n), ", ") + `)
AS v (hash, kind, scopes, audience, auth_time, issued_at, expires_at, revoked_at, rotated_at, jkt, authorization_details, delegation))
SELECT ` + tokenCols + ` FROM r`
		}
	}
	return qs
}()

// rotateInOne is the common case of RotateRefreshToken on PostgreSQL, a live token rotated, in
// one statement: one round trip instead of five (BEGIN, the locking read, the retire, the
// insert, COMMIT; decision 0045). done is false when the statement could not decide, and the
// transaction then runs as before: the token is not a live unrotated refresh token (a grace
// replay, reuse, expiry, revocation, unknown), a successor disagrees with it, the successors
// do not all set the same fields, or PostgreSQL asked for a retry. At READ COMMITTED a
// concurrent rotation of the same token waits for the row lock, finds rotated_at set and
// takes the transaction, which sees the rotation that won, as before.
func (s *Store) rotateInOne(ctx context.Context, r store.RotateRequest) (out store.Rotation, done bool, err error) {
	n := len(r.New)
	if n == 0 || n >= len(qRotate) {
		return out, false, nil
	}
	first := r.New[0]
	nilCode := 0
	if first.CodeHash == nil {
		nilCode = 1
	} else if len(first.CodeHash) == 0 {
		return out, false, nil
	}
	for _, t := range r.New[1:] {
		if t.FamilyID != first.FamilyID || t.Project != first.Project || t.ClientID != first.ClientID ||
			t.Subject != first.Subject || t.Generation != first.Generation ||
			(t.CodeHash == nil) != (first.CodeHash == nil) || !bytes.Equal(t.CodeHash, first.CodeHash) {
			return out, false, nil
		}
	}
	now := r.Now
	args := make([]any, 0, 12+11*n)
	args = append(args, ns(now), blob(r.Sealed), ns(now.Add(r.Grace)), r.OldHash, ns(now),
		first.Project, first.ClientID, first.Subject, first.FamilyID, int64(first.Generation), int64(first.Generation))
	if nilCode == 0 {
		args = append(args, first.CodeHash)
	}
	for _, t := range r.New {
		deleg, err := delegation(t)
		if err != nil {
			return out, true, err
		}
		args = append(args, t.Hash, string(t.Kind), list(t.Scopes), list(t.Audience), ns(t.AuthTime),
			ns(t.IssuedAt), ns(t.ExpiresAt), nullNS(t.RevokedAt), nullNS(t.RotatedAt), t.JKT, t.AuthorizationDetails, deleg)
	}
	// Rotating withdraws nothing: the old refresh token's successor takes over.
	err = s.writeQuiet(ctx, func(x q) error {
		return x.row(ctx, scanToken(&out.Old, nil), qRotate[n][nilCode], args...)
	})
	switch {
	case err == nil:
		out.Outcome = store.OutcomeRotated
		return out, true, nil
	case errors.Is(err, store.ErrNotFound) || s.retryable(err):
		return store.Rotation{}, false, nil
	default:
		return store.Rotation{}, true, conflict(err)
	}
}

// liveSuccessor reports whether old's successor refresh token is the family's live head:
// exactly one, neither rotated nor revoked nor expired.
func liveSuccessor(ctx context.Context, x q, old store.Token, now time.Time) (bool, error) {
	n, live := 0, 0
	err := x.each(ctx, func(r scanner) error {
		var expires int64
		var revoked, rotated sql.NullInt64
		if err := r.Scan(&expires, &revoked, &rotated); err != nil {
			return err
		}
		n++
		if !revoked.Valid && !rotated.Valid && ns(now) < expires {
			live++
		}
		return nil
	}, qSuccessors, old.FamilyID, int64(old.Generation+1))
	if err != nil {
		return false, err
	}
	return n == 1 && live == 1, nil
}

// successors completes the new tokens from the old one and rejects tokens that would leave the
// family (a caller bug that would defeat reuse detection).
func successors(old store.Token, in []store.Token) ([]store.Token, error) {
	out := make([]store.Token, len(in))
	for i, t := range in {
		fill := func(dst *string, src, what string) error {
			if *dst == "" {
				*dst = src
			} else if *dst != src {
				return fmt.Errorf("sqlstore: successor token has %s %q, old token has %q", what, *dst, src)
			}
			return nil
		}
		for _, f := range []struct {
			dst       *string
			src, what string
		}{
			{&t.FamilyID, old.FamilyID, "family"},
			{&t.Project, old.Project, "project"},
			{&t.ClientID, old.ClientID, "client"},
			{&t.Subject, old.Subject, "subject"},
		} {
			if err := fill(f.dst, f.src, f.what); err != nil {
				return nil, err
			}
		}
		switch {
		case t.Generation == 0:
			t.Generation = old.Generation + 1
		case t.Generation != old.Generation+1:
			return nil, fmt.Errorf("sqlstore: successor token has generation %d, want %d", t.Generation, old.Generation+1)
		}
		if t.CodeHash == nil {
			t.CodeHash = old.CodeHash
		} else if !bytes.Equal(t.CodeHash, old.CodeHash) {
			return nil, fmt.Errorf("sqlstore: successor token names another code")
		}
		if t.AuthTime.IsZero() {
			t.AuthTime = old.AuthTime
		}
		out[i] = t
	}
	return out, nil
}

// RevokeToken revokes an access token, or a refresh token's whole family.
func (s *Store) RevokeToken(ctx context.Context, hash []byte, now time.Time) (err error) {
	defer s.observe(ctx, "RevokeToken", time.Now(), &err)
	return s.tx(ctx, func(x q) error {
		var t store.Token
		if err := x.row(ctx, scanToken(&t, nil), qGetToken, hash); err != nil {
			return err
		}
		var err error
		if t.Kind == store.RefreshToken {
			_, err = revoke(ctx, x, qRevokeFamily, now, t.FamilyID)
		} else {
			_, err = revoke(ctx, x, qRevokeHash, now, hash)
		}
		return err
	})
}

func (s *Store) RevokeFamily(ctx context.Context, familyID string, now time.Time) (_ int64, err error) {
	defer s.observe(ctx, "RevokeFamily", time.Now(), &err)
	var n int64
	err = s.tx(ctx, func(x q) error {
		live, err := revoke(ctx, x, qRevokeFamily, now, familyID)
		n = sum(live)
		return err
	})
	return n, err
}

func (s *Store) RevokeByCode(ctx context.Context, codeHash []byte, now time.Time) (_ int64, err error) {
	defer s.observe(ctx, "RevokeByCode", time.Now(), &err)
	// The mark commits before the revocation starts (store.AuthCodes.AuthCodeReplayed): in one
	// transaction, a redemption could store its tokens after the revocation looked and read
	// the mark before it committed, and both would miss.
	if _, err := s.wexec(ctx, qMarkCodeReplayed, ns(now), codeHash); err != nil {
		return 0, err
	}
	var n int64
	err = s.tx(ctx, func(x q) error {
		live, err := revoke(ctx, x, qRevokeByCode, now, codeHash)
		n = sum(live)
		return err
	})
	return n, err
}

// RevokeClientTokens revokes the live tokens of the given clients in one transaction; every
// requested client appears in the result, with 0 if it held none.
func (s *Store) RevokeClientTokens(ctx context.Context, project string, clientIDs []string, now time.Time) (_ map[string]int64, err error) {
	defer s.observe(ctx, "RevokeClientTokens", time.Now(), &err)
	var out map[string]int64
	err = s.tx(ctx, func(x q) error {
		out = make(map[string]int64, len(clientIDs))
		for _, id := range clientIDs {
			live, err := revoke(ctx, x, qRevokeClient, now, project, id)
			if err != nil {
				return err
			}
			out[id] += live[id]
		}
		return nil
	})
	return out, err
}

// RevokeClientTokensIn revokes one client's live tokens in each project, in one transaction.
func (s *Store) RevokeClientTokensIn(ctx context.Context, projects []string, clientID string, now time.Time) (_ map[string]int64, err error) {
	defer s.observe(ctx, "RevokeClientTokensIn", time.Now(), &err)
	var out map[string]int64
	err = s.tx(ctx, func(x q) error {
		out = make(map[string]int64, len(projects))
		for _, p := range projects {
			live, err := revoke(ctx, x, qRevokeClient, now, p, clientID)
			if err != nil {
				return err
			}
			out[p] += live[clientID]
		}
		return nil
	})
	return out, err
}

// CountLiveTokens counts live tokens per client; clients with none are absent.
func (s *Store) CountLiveTokens(ctx context.Context, project string, now time.Time) (_ map[string]int64, err error) {
	defer s.observe(ctx, "CountLiveTokens", time.Now(), &err)
	out := map[string]int64{}
	err = s.reader().each(ctx, func(r scanner) error {
		var id string
		var n int64
		if err := r.Scan(&id, &n); err != nil {
			return err
		}
		out[id] = n
		return nil
	}, qCountLive, project, ns(now))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// delegationColumn is the delegation column's JSON: a token's act and may_act claims.
type delegationColumn struct {
	Act    *store.Actor `json:"act,omitempty"`
	MayAct *store.Actor `json:"may_act,omitempty"`
}

// delegation is t's delegation column, "" when it has neither claim.
func delegation(t store.Token) (string, error) {
	if t.Act == nil && t.MayAct == nil {
		return "", nil
	}
	b, err := json.Marshal(delegationColumn{Act: t.Act, MayAct: t.MayAct})
	return string(b), err
}

func fromDelegation(s string) (act, mayAct *store.Actor, err error) {
	if s == "" {
		return nil, nil, nil
	}
	var d delegationColumn
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return nil, nil, fmt.Errorf("sqlstore: token delegation: %w", err)
	}
	return d.Act, d.MayAct, nil
}
