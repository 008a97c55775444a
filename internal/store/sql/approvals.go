package sqlstore

import (
	"context"
	"errors"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

const approvalCols = `hash, id, project, client_id, subject, scopes, binding_message, authorization_details,
	delivery_mode, notification_token, status, interval_ns, polled_at, created_at, expires_at, decided_at`

var (
	qCreateApproval = sqlText(`INSERT INTO approval_requests (` + approvalCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qListApprovals = sqlText(`SELECT ` + approvalCols + ` FROM approval_requests
		WHERE project = ? AND subject = ? AND status = 'pending' AND expires_at > ? ORDER BY created_at, id`)
	qDecideApproval = sqlText(`UPDATE approval_requests SET status = ?, decided_at = ?
		WHERE project = ? AND subject = ? AND id = ? AND status = 'pending' AND expires_at > ?
		RETURNING ` + approvalCols)
	qLockApproval   = sqlText(`SELECT ` + approvalCols + ` FROM approval_requests WHERE hash = ?` + forUpdate)
	qDeleteApproval = sqlText(`DELETE FROM approval_requests WHERE hash = ?`)
	qPolledApproval = sqlText(`UPDATE approval_requests SET polled_at = ?, interval_ns = ? WHERE hash = ?`)
	qBlockClient    = sqlText(`INSERT INTO approval_blocks (project, subject, client_id, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`)
	qUnblockClient  = sqlText(`DELETE FROM approval_blocks WHERE project = ? AND subject = ? AND client_id = ?`)
	qListBlocks     = sqlText(`SELECT project, subject, client_id, created_at FROM approval_blocks WHERE project = ? AND subject = ? ORDER BY created_at, client_id`)
	qClientBlocked  = sqlText(`SELECT 1 FROM approval_blocks WHERE project = ? AND subject = ? AND client_id = ?`)
)

func scanApproval(a *store.Approval) func(scanner) error {
	return func(r scanner) error {
		var scopes, status string
		var interval, polled, created, expires, decided int64
		if err := r.Scan(&a.Hash, &a.ID, &a.Project, &a.ClientID, &a.Subject, &scopes, &a.BindingMessage,
			&a.AuthorizationDetails, &a.DeliveryMode, &a.NotificationToken, &status, &interval, &polled,
			&created, &expires, &decided); err != nil {
			return err
		}
		var err error
		if a.Scopes, err = fromList(scopes); err != nil {
			return err
		}
		a.Status, a.Interval = store.ApprovalStatus(status), time.Duration(interval)
		a.CreatedAt, a.ExpiresAt = fromNS(created), fromNS(expires)
		a.PolledAt, a.DecidedAt = zeroNS(polled), zeroNS(decided)
		return nil
	}
}

// zeroNS reads a time stored as 0 for "never" back as the zero time.
func zeroNS(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return fromNS(n)
}

// nsOrZero stores the zero time as 0.
func nsOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return ns(t)
}

func (s *Store) CreateApproval(ctx context.Context, a store.Approval) (err error) {
	defer s.observe(ctx, "CreateApproval", time.Now(), &err)
	_, err = s.wexec(ctx, qCreateApproval, a.Hash, a.ID, a.Project, a.ClientID, a.Subject, list(a.Scopes),
		a.BindingMessage, a.AuthorizationDetails, a.DeliveryMode, blob(a.NotificationToken), string(a.Status),
		int64(a.Interval), nsOrZero(a.PolledAt), ns(a.CreatedAt), ns(a.ExpiresAt), nsOrZero(a.DecidedAt))
	return conflict(err)
}

func (s *Store) ListApprovals(ctx context.Context, project, subject string, now time.Time) (_ []store.Approval, err error) {
	defer s.observe(ctx, "ListApprovals", time.Now(), &err)
	return all(ctx, s.reader(), scanApproval, qListApprovals, project, subject, ns(now))
}

func (s *Store) DecideApproval(ctx context.Context, project, subject, id string, status store.ApprovalStatus, now time.Time) (_ store.Approval, err error) {
	defer s.observe(ctx, "DecideApproval", time.Now(), &err)
	if status != store.ApprovalApproved && status != store.ApprovalDenied {
		return store.Approval{}, errors.New("sqlstore: an approval is decided as approved or denied")
	}
	var a store.Approval
	err = s.wrow(ctx, scanApproval(&a), qDecideApproval, string(status), ns(now), project, subject, id, ns(now))
	return a, err
}

// PollApproval holds the row (PostgreSQL: FOR UPDATE; SQLite: the write transaction holds the
// database lock) while fn decides, so two polls of one approved request cannot both consume it.
func (s *Store) PollApproval(ctx context.Context, hash []byte, fn func(*store.Approval) (bool, error)) (store.Approval, error) {
	var observed error
	defer s.observe(ctx, "PollApproval", time.Now(), &observed)
	var a store.Approval
	var refused error
	err := s.tx1(ctx, func(x q) error {
		if err := x.row(ctx, scanApproval(&a), qLockApproval, hash); err != nil {
			return err
		}
		next := a
		consume, err := fn(&next)
		if err != nil {
			refused = err
			return err
		}
		if consume {
			_, err = x.exec(ctx, qDeleteApproval, hash)
			return err
		}
		a.PolledAt, a.Interval = next.PolledAt, next.Interval
		_, err = x.exec(ctx, qPolledApproval, nsOrZero(a.PolledAt), int64(a.Interval), hash)
		return err
	})
	switch {
	case err == nil:
		return a, nil
	case refused != nil && errors.Is(err, refused):
		return a, err
	case errors.Is(err, store.ErrNotFound):
		return store.Approval{}, err
	}
	observed = err
	return store.Approval{}, err
}

func (s *Store) BlockClient(ctx context.Context, b store.ApprovalBlock) (err error) {
	defer s.observe(ctx, "BlockClient", time.Now(), &err)
	_, err = s.wexec(ctx, qBlockClient, b.Project, b.Subject, b.ClientID, ns(b.CreatedAt))
	return err
}

func (s *Store) UnblockClient(ctx context.Context, project, subject, clientID string) (err error) {
	defer s.observe(ctx, "UnblockClient", time.Now(), &err)
	return s.wexecOne(ctx, qUnblockClient, project, subject, clientID)
}

func (s *Store) ListBlockedClients(ctx context.Context, project, subject string) (_ []store.ApprovalBlock, err error) {
	defer s.observe(ctx, "ListBlockedClients", time.Now(), &err)
	return all(ctx, s.reader(), func(b *store.ApprovalBlock) func(scanner) error {
		return func(r scanner) error {
			var created int64
			if err := r.Scan(&b.Project, &b.Subject, &b.ClientID, &created); err != nil {
				return err
			}
			b.CreatedAt = fromNS(created)
			return nil
		}
	}, qListBlocks, project, subject)
}

func (s *Store) ClientBlocked(ctx context.Context, project, subject, clientID string) (_ bool, err error) {
	defer s.observe(ctx, "ClientBlocked", time.Now(), &err)
	err = s.reader().row(ctx, func(r scanner) error { var one int; return r.Scan(&one) }, qClientBlocked, project, subject, clientID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
