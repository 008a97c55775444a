package conformance

import (
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// testRevisionMovesOnWithdrawal: each write that can withdraw what a cached decision read (a
// token revoked, a grant or a permission withdrawn, a connection changed or removed, a client
// removed) leaves the revision greater than it was read before the write; a read with
// nothing written between returns the same revision (docs/decisions/0082).
func testRevisionMovesOnWithdrawal(t *testing.T, s store.Store) {
	ctx := t.Context()
	at0, _ := issue(t, s, "one", "c1", "alice")
	c := saveConnection(t, s, "alice", "github", "1001")
	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c1", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
	read := func() int64 {
		t.Helper()
		n, err := s.Revision(ctx)
		must(t, err)
		return n
	}
	prev := read()
	equal(t, "revision read twice", read(), prev)
	for _, w := range []struct {
		name string
		fn   func() error
	}{
		{"RevokeToken", func() error { return s.RevokeToken(ctx, at0.Hash, at(time.Minute)) }},
		{"UpdateConnection", func() error {
			_, err := s.UpdateConnection(ctx, project, c.ID, func(c store.Connection) (store.Connection, error) {
				c.Status = store.ConnectionNeedsReconnect
				return c, nil
			})
			return err
		}},
		{"DeletePermission", func() error { return s.DeletePermission(ctx, project, "alice", "github", "c1") }},
		{"DeleteConnection", func() error { return s.DeleteConnection(ctx, project, c.ID) }},
		{"DeleteGrant", func() error { return s.DeleteGrant(ctx, project, "alice", "c1", at(time.Minute)) }},
		{"DeleteClient", func() error { return s.DeleteClient(ctx, project, "c1", at(time.Minute)) }},
	} {
		_ = w.fn() // moved whether or not there was anything left to withdraw
		if n := read(); n <= prev {
			t.Fatalf("%s: revision %d, not greater than %d read before it", w.name, n, prev)
		} else {
			prev = n
		}
	}
}

// testRevisionQuietWrites: writes that cannot withdraw anything (a new token, an audit
// record, a one-time identifier) leave the revision where it was, so a busy agent's own DPoP
// proofs and the audit log do not empty the token proxy's decision cache.
func testRevisionQuietWrites(t *testing.T, s store.Store) {
	ctx := t.Context()
	before, err := s.Revision(ctx)
	must(t, err)
	issue(t, s, "two", "c1", "bob")
	must(t, s.UseOnce(ctx, hash("dpop|jti"), at(time.Minute), base))
	must(t, s.AppendAudit(ctx, store.AuditRecord{Project: project, Time: base, Actor: "client:c1", Action: "token.proxied", Outcome: store.OutcomeSuccess}))
	after, err := s.Revision(ctx)
	must(t, err)
	equal(t, "revision after quiet writes", after, before)
}
