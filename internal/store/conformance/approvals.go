package conformance

import (
	"errors"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func newApproval(name, subject string) store.Approval {
	return store.Approval{
		Hash: hash(name), ID: "id-" + name, Project: project, ClientID: "c1", Subject: subject,
		Scopes: []string{"openid", "read"}, BindingMessage: "<b>Deploy</b> v2?",
		AuthorizationDetails: `[{"type":"payment","amount":"10"}]`, DeliveryMode: "ping",
		NotificationToken: []byte("sealed"), Status: store.ApprovalPending, Interval: 5 * time.Second,
		CreatedAt: base, ExpiresAt: at(10 * time.Minute),
	}
}

// testApprovalLifecycle: only the named person lists and decides a pending request, once.
func testApprovalLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := newApproval("a1", "alice")
	must(t, s.CreateApproval(ctx, a))
	wantErr(t, s.CreateApproval(ctx, a), store.ErrConflict)
	other := newApproval("a2", "mallory")
	must(t, s.CreateApproval(ctx, other))
	expired := newApproval("a3", "alice")
	expired.ExpiresAt = at(time.Minute)
	must(t, s.CreateApproval(ctx, expired))

	got, err := s.ListApprovals(ctx, project, "alice", at(2*time.Minute))
	must(t, err)
	equal(t, "alice's pending requests", got, []store.Approval{a})

	// Mallory deciding alice's request changes nothing.
	_, err = s.DecideApproval(ctx, project, "mallory", a.ID, store.ApprovalApproved, at(2*time.Minute))
	wantErr(t, err, store.ErrNotFound)
	// An expired request can no longer be decided.
	_, err = s.DecideApproval(ctx, project, "alice", expired.ID, store.ApprovalApproved, at(2*time.Minute))
	wantErr(t, err, store.ErrNotFound)

	dec, err := s.DecideApproval(ctx, project, "alice", a.ID, store.ApprovalApproved, at(2*time.Minute))
	must(t, err)
	want := a
	want.Status, want.DecidedAt = store.ApprovalApproved, at(2*time.Minute)
	equal(t, "decided request", dec, want)
	// Decided once: denying it afterwards changes nothing.
	_, err = s.DecideApproval(ctx, project, "alice", a.ID, store.ApprovalDenied, at(3*time.Minute))
	wantErr(t, err, store.ErrNotFound)
	got, err = s.ListApprovals(ctx, project, "alice", at(3*time.Minute))
	must(t, err)
	equal(t, "alice's pending requests after deciding", len(got), 0)
	got, err = s.ListApprovals(ctx, project, "mallory", at(3*time.Minute))
	must(t, err)
	equal(t, "mallory's pending requests", got, []store.Approval{other})
}

// testApprovalPoll: a poll that keeps the request stores only the poll time and interval; a
// refusal by fn changes nothing; a consumed request is gone.
func testApprovalPoll(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := newApproval("a1", "alice")
	must(t, s.CreateApproval(ctx, a))
	got, err := s.PollApproval(ctx, a.Hash, func(r *store.Approval) (bool, error) {
		r.PolledAt, r.Interval = at(time.Second), 10*time.Second
		r.Subject, r.Status = "mallory", store.ApprovalApproved // not stored
		return false, nil
	})
	must(t, err)
	want := a
	want.PolledAt, want.Interval = at(time.Second), 10*time.Second
	equal(t, "polled request", got, want)

	errOther := errors.New("another client")
	got, err = s.PollApproval(ctx, a.Hash, func(r *store.Approval) (bool, error) {
		r.Interval = time.Hour
		return true, errOther
	})
	wantErr(t, err, errOther)
	equal(t, "refused poll's row", got, want)

	_, err = s.PollApproval(ctx, a.Hash, func(r *store.Approval) (bool, error) {
		equal(t, "row seen by the next poll", *r, want)
		return true, nil
	})
	must(t, err)
	_, err = s.PollApproval(ctx, a.Hash, func(*store.Approval) (bool, error) { return true, nil })
	wantErr(t, err, store.ErrNotFound)
	_, err = s.DecideApproval(ctx, project, "alice", a.ID, store.ApprovalApproved, at(2*time.Second))
	wantErr(t, err, store.ErrNotFound)
}

// testApprovalRedeemConcurrent: of many polls of one approved request at once, one redeems it.
func testApprovalRedeemConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := newApproval("a1", "alice")
	must(t, s.CreateApproval(ctx, a))
	_, err := s.DecideApproval(ctx, project, "alice", a.ID, store.ApprovalApproved, at(time.Second))
	must(t, err)
	const n = 50
	errs := make([]error, n)
	parallel(n, func(i int) {
		_, errs[i] = s.PollApproval(ctx, a.Hash, func(r *store.Approval) (bool, error) {
			return r.Status == store.ApprovalApproved, nil
		})
	})
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, store.ErrNotFound):
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	equal(t, "redemptions of one approved request", won, 1)
}

// testApprovalCollected: expired requests are collected, live ones stay.
func testApprovalCollected(t *testing.T, s store.Store) {
	ctx := t.Context()
	old, live := newApproval("old", "alice"), newApproval("live", "alice")
	old.ExpiresAt = at(time.Minute)
	must(t, s.CreateApproval(ctx, old))
	must(t, s.CreateApproval(ctx, live))
	res, err := s.GarbageCollect(ctx, at(2*time.Minute))
	must(t, err)
	equal(t, "approvals collected", res["approvals"], int64(1))
	_, err = s.PollApproval(ctx, old.Hash, func(*store.Approval) (bool, error) { return false, nil })
	wantErr(t, err, store.ErrNotFound)
	_, err = s.PollApproval(ctx, live.Hash, func(*store.Approval) (bool, error) { return false, nil })
	must(t, err)
}

// testApprovalBlocks: a block is the person's own, per client, idempotent, and can be lifted.
func testApprovalBlocks(t *testing.T, s store.Store) {
	ctx := t.Context()
	b := store.ApprovalBlock{Project: project, Subject: "alice", ClientID: "c1", CreatedAt: base}
	must(t, s.BlockClient(ctx, b))
	must(t, s.BlockClient(ctx, store.ApprovalBlock{Project: project, Subject: "alice", ClientID: "c1", CreatedAt: at(time.Minute)}))
	blocked, err := s.ClientBlocked(ctx, project, "alice", "c1")
	must(t, err)
	equal(t, "c1 blocked by alice", blocked, true)
	blocked, err = s.ClientBlocked(ctx, project, "mallory", "c1")
	must(t, err)
	equal(t, "c1 blocked by mallory", blocked, false)
	blocked, err = s.ClientBlocked(ctx, project, "alice", "c2")
	must(t, err)
	equal(t, "c2 blocked by alice", blocked, false)
	list, err := s.ListBlockedClients(ctx, project, "alice")
	must(t, err)
	equal(t, "alice's blocks", list, []store.ApprovalBlock{b})
	wantErr(t, s.UnblockClient(ctx, project, "mallory", "c1"), store.ErrNotFound)
	must(t, s.UnblockClient(ctx, project, "alice", "c1"))
	blocked, err = s.ClientBlocked(ctx, project, "alice", "c1")
	must(t, err)
	equal(t, "c1 blocked after unblocking", blocked, false)
	wantErr(t, s.UnblockClient(ctx, project, "alice", "c1"), store.ErrNotFound)
}
