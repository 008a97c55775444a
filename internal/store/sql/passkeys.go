package sqlstore

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const passkeyCols = `project, credential_id, subject, name, public_key, sign_count, transports, aaguid,
attestation_format, user_verified, backup_eligible, backup_state, created_at, last_used_at`

var (
	qAddPasskey    = sqlText(`INSERT INTO passkeys (` + passkeyCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qGetPasskey    = sqlText(`SELECT ` + passkeyCols + ` FROM passkeys WHERE project = ? AND credential_id = ?`)
	qListPasskeys  = sqlText(`SELECT ` + passkeyCols + ` FROM passkeys WHERE project = ? AND subject = ? ORDER BY created_at, credential_id`)
	qDeletePasskey = sqlText(`DELETE FROM passkeys WHERE project = ? AND subject = ? AND credential_id = ?`)
	// The comparison and the write are one statement, so two sign-ins racing with the same
	// counter value cannot both pass.
	qUsePasskey = sqlText(`UPDATE passkeys SET sign_count = ?, backup_state = ?, last_used_at = ?
WHERE project = ? AND credential_id = ? AND (sign_count < ? OR (sign_count = 0 AND ? = 0))`)
	qPasskeyExists = sqlText(`SELECT 1 FROM passkeys WHERE project = ? AND credential_id = ?`)

	qCreateCeremony = sqlText(`INSERT INTO passkey_ceremonies (id_hash, project, kind, subject, data, expires_at) VALUES (?, ?, ?, ?, ?, ?)`)
	qTakeCeremony   = sqlText(`DELETE FROM passkey_ceremonies WHERE id_hash = ? RETURNING id_hash, project, kind, subject, data, expires_at`)
)

func scanPasskey(k *store.Passkey) func(scanner) error {
	return func(r scanner) error {
		var count, uv, be, bs, created, used int64
		var transports string
		if err := r.Scan(&k.Project, &k.CredentialID, &k.Subject, &k.Name, &k.PublicKey, &count, &transports,
			&k.AAGUID, &k.AttestationFormat, &uv, &be, &bs, &created, &used); err != nil {
			return err
		}
		if len(k.AAGUID) == 0 {
			k.AAGUID = nil // drivers differ on an empty BLOB
		}
		k.SignCount = uint32(count) //nolint:gosec // G115: written from a uint32
		if transports != "" {
			k.Transports = strings.Split(transports, " ")
		}
		k.UserVerified, k.BackupEligible, k.BackupState = uv != 0, be != 0, bs != 0
		k.CreatedAt, k.LastUsedAt = fromNS(created), fromNS(used)
		return nil
	}
}

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (s *Store) AddPasskey(ctx context.Context, k store.Passkey) (err error) {
	defer s.observe(ctx, "AddPasskey", time.Now(), &err)
	aaguid := k.AAGUID
	if aaguid == nil {
		aaguid = []byte{}
	}
	_, err = s.wexec(ctx, qAddPasskey, k.Project, k.CredentialID, k.Subject, k.Name, k.PublicKey, int64(k.SignCount),
		strings.Join(k.Transports, " "), aaguid, k.AttestationFormat, flag(k.UserVerified), flag(k.BackupEligible),
		flag(k.BackupState), ns(k.CreatedAt), ns(k.LastUsedAt))
	return conflict(err)
}

func (s *Store) GetPasskey(ctx context.Context, project string, credentialID []byte) (_ store.Passkey, err error) {
	defer s.observe(ctx, "GetPasskey", time.Now(), &err)
	var out store.Passkey
	err = s.reader().row(ctx, scanPasskey(&out), qGetPasskey, project, credentialID)
	return out, err
}

func (s *Store) ListPasskeys(ctx context.Context, project, subject string) (_ []store.Passkey, err error) {
	defer s.observe(ctx, "ListPasskeys", time.Now(), &err)
	return all(ctx, s.reader(), scanPasskey, qListPasskeys, project, subject)
}

func (s *Store) DeletePasskey(ctx context.Context, project, subject string, credentialID []byte) (err error) {
	defer s.observe(ctx, "DeletePasskey", time.Now(), &err)
	return s.wexecOne(ctx, qDeletePasskey, project, subject, credentialID)
}

func (s *Store) UsePasskey(ctx context.Context, project string, credentialID []byte, signCount uint32, backupState bool, now time.Time) (err error) {
	defer s.observe(ctx, "UsePasskey", time.Now(), &err)
	n, err := s.wexec(ctx, qUsePasskey, int64(signCount), flag(backupState), ns(now), project, credentialID,
		int64(signCount), int64(signCount))
	if err != nil || n == 1 {
		return err
	}
	err = s.reader().row(ctx, func(r scanner) error { var one int; return r.Scan(&one) }, qPasskeyExists, project, credentialID)
	if errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err != nil {
		return err
	}
	return store.ErrConflict
}

func (s *Store) CreatePasskeyCeremony(ctx context.Context, c store.PasskeyCeremony) (err error) {
	defer s.observe(ctx, "CreatePasskeyCeremony", time.Now(), &err)
	_, err = s.wexec(ctx, qCreateCeremony, c.IDHash, c.Project, c.Kind, c.Subject, c.Data, ns(c.Expires))
	return conflict(err)
}

// TakePasskeyCeremony deletes first and checks the expiry after: an expired ceremony is gone
// either way.
func (s *Store) TakePasskeyCeremony(ctx context.Context, idHash []byte, now time.Time) (_ store.PasskeyCeremony, err error) {
	defer s.observe(ctx, "TakePasskeyCeremony", time.Now(), &err)
	var out store.PasskeyCeremony
	err = s.wrow(ctx, func(r scanner) error {
		var expires int64
		if err := r.Scan(&out.IDHash, &out.Project, &out.Kind, &out.Subject, &out.Data, &expires); err != nil {
			return err
		}
		out.Expires = fromNS(expires)
		return nil
	}, qTakeCeremony, idHash)
	if err != nil {
		return store.PasskeyCeremony{}, err
	}
	if !now.Before(out.Expires) {
		return store.PasskeyCeremony{}, store.ErrNotFound
	}
	return out, nil
}

// ListPasskeysPage lists passkeys in (project, credential_id) order, the primary key's. The
// key's credential ID travels as base64url text and is compared as the bytes it stands for (a
// BLOB compared with TEXT would order by type, not by value).
func (s *Store) ListPasskeysPage(ctx context.Context, q store.AdminQuery) (_ []store.Passkey, _ []string, err error) {
	defer s.observe(ctx, "ListPasskeysPage", time.Now(), &err)
	p := pageQuery{
		sel:     `SELECT ` + passkeyCols + ` FROM passkeys`,
		projCol: "project",
		key:     []string{"project", "credential_id"},
	}
	optional("subject = ?", q.Subject, &p)
	if q.After != nil {
		if len(q.After) != 2 {
			return nil, nil, errors.New("sqlstore: a passkey page key has 2 parts")
		}
		id, err := base64.RawURLEncoding.DecodeString(q.After[1])
		if err != nil {
			return nil, nil, errors.New("sqlstore: a passkey page key's credential ID is not base64url")
		}
		p.conds = append(p.conds, "(project, credential_id) > (?, ?)")
		p.args = append(p.args, q.After[0], id)
		q.After = nil
	}
	return listPage(ctx, s, p, q, nil, scanPasskey, func(k store.Passkey) []string {
		return []string{k.Project, base64.RawURLEncoding.EncodeToString(k.CredentialID)}
	})
}
