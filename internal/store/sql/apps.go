package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

var qRevokeAppPerms = sqlText(`DELETE FROM agent_permissions WHERE project = ? AND subject = ? AND client_id = ?`)

// RevokeApp is DeleteGrant and the deletion of the client's permissions in one transaction
// (store.Apps).
func (s *Store) RevokeApp(ctx context.Context, project, subject, clientID string, now time.Time) (err error) {
	defer s.observe(ctx, "RevokeApp", time.Now(), &err)
	return s.tx(ctx, func(x q) error {
		grants, err := x.execN(ctx, qDeleteGrant, project, subject, clientID)
		if err != nil {
			return err
		}
		live, err := revoke(ctx, x, qRevokeHolder, now, project, clientID, subject)
		if err != nil {
			return err
		}
		perms, err := x.execN(ctx, qRevokeAppPerms, project, subject, clientID)
		if err != nil {
			return err
		}
		if grants == 0 && live[clientID] == 0 && perms == 0 {
			return store.ErrNotFound
		}
		return nil
	})
}
