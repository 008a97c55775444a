package conformance

import (
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// testTokenDelegation: a token's act chain and may_act come back as stored, through every read
// that returns tokens (GetToken, TokenHolder, SubjectAccess) and through rotation, which stores
// what the caller puts on each new token.
func testTokenDelegation(t *testing.T, s store.Store) {
	ctx := t.Context()
	chain := &store.Actor{Sub: "mcp-b", ClientName: "Files MCP", Act: &store.Actor{Sub: "agent-a", ClientName: "Repo Helper"}}
	may := &store.Actor{Sub: "mcp-b"}
	a := store.Token{Hash: hash("deleg"), Kind: store.AccessToken, Project: project, ClientID: "mcp-b", Subject: "alice",
		FamilyID: "fd", IssuedAt: base, ExpiresAt: at(time.Hour), Act: chain, MayAct: may}
	rt := a
	rt.Hash, rt.Kind, rt.MayAct = hash("deleg-rt"), store.RefreshToken, nil
	plain := store.Token{Hash: hash("plain"), Kind: store.AccessToken, Project: project, ClientID: "svc",
		FamilyID: "fp", IssuedAt: base, ExpiresAt: at(time.Hour)}
	must(t, s.CreateTokens(ctx, a, rt, plain))
	equal(t, "delegated token", getToken(t, s, "deleg"), a)
	equal(t, "refresh token", getToken(t, s, "deleg-rt"), rt)
	equal(t, "token without a chain", getToken(t, s, "plain"), plain)
	equal(t, "depth", getToken(t, s, "deleg").Act.Depth(), 2)
	equal(t, "chain", getToken(t, s, "deleg").Act.Chain(), []string{"mcp-b", "agent-a"})

	_, err := s.UpsertPerson(ctx, store.Person{Project: project, ID: "alice", Source: "password", SourceSubject: "alice", CreatedAt: base})
	must(t, err)
	held, _, found, err := s.TokenHolder(ctx, a.Hash)
	must(t, err)
	equal(t, "holder found", found, true)
	equal(t, "holder act", held.Act, chain)
	equal(t, "holder may_act", held.MayAct, may)
	sub, _, err := s.SubjectAccess(ctx, a.Hash, "ns/github")
	must(t, err)
	equal(t, "subject access act", sub.Act, chain)
	equal(t, "subject access may_act", sub.MayAct, may)

	next := rt
	next.Hash, next.Generation = hash("deleg-rt2"), 1
	rot, err := s.RotateRefreshToken(ctx, store.RotateRequest{OldHash: rt.Hash, New: []store.Token{next}, Now: at(time.Minute)})
	must(t, err)
	equal(t, "outcome", rot.Outcome, store.OutcomeRotated)
	equal(t, "old act", rot.Old.Act, chain)
	equal(t, "successor act", getToken(t, s, "deleg-rt2").Act, chain)
}

// testConnectionActors: an agent's use is recorded once per connection, agent and chain, keeping
// the latest time; a use of a connection of another project or one that no longer exists is
// passed over; deleting the connection deletes its actors.
func testConnectionActors(t *testing.T, s store.Store) {
	ctx := t.Context()
	c1 := saveConnection(t, s, "alice", "ns/github", "alice-gh")
	c2 := saveConnection(t, s, "bob", "ns/github", "bob-gh")
	use := func(conn, client, via string, when time.Duration) {
		t.Helper()
		must(t, s.RecordConnectionActor(ctx, store.ConnectionActor{Project: project, ConnectionID: conn,
			ClientID: client, Via: via, LastUsedAt: at(when)}))
	}
	use(c1.ID, "agent-a", "", time.Minute)
	use(c1.ID, "agent-a", "", 3*time.Minute)
	use(c1.ID, "agent-a", "", 2*time.Minute) // older than the one stored: kept at 3m
	use(c1.ID, "mcp-b", "agent-a", 4*time.Minute)
	use(c2.ID, "agent-a", "", 5*time.Minute)
	use("gone", "agent-a", "", time.Minute)
	must(t, s.RecordConnectionActor(ctx, store.ConnectionActor{Project: "other/project", ConnectionID: c1.ID,
		ClientID: "intruder", LastUsedAt: at(time.Minute)}))

	got, err := s.ListConnectionActors(ctx, project, []string{c1.ID, c2.ID, "gone"})
	must(t, err)
	want := []store.ConnectionActor{
		{Project: project, ConnectionID: c1.ID, ClientID: "mcp-b", Via: "agent-a", LastUsedAt: at(4 * time.Minute)},
		{Project: project, ConnectionID: c1.ID, ClientID: "agent-a", LastUsedAt: at(3 * time.Minute)},
		{Project: project, ConnectionID: c2.ID, ClientID: "agent-a", LastUsedAt: at(5 * time.Minute)},
	}
	if c2.ID < c1.ID {
		want = append(want[2:], want[:2]...)
	}
	equal(t, "actors", got, want)
	only, err := s.ListConnectionActors(ctx, project, []string{c2.ID})
	must(t, err)
	equal(t, "one connection's actors", len(only), 1)
	none, err := s.ListConnectionActors(ctx, "other/project", []string{c1.ID})
	must(t, err)
	equal(t, "another project's view", len(none), 0)

	must(t, s.DeleteConnection(ctx, project, c1.ID))
	got, err = s.ListConnectionActors(ctx, project, []string{c1.ID})
	must(t, err)
	equal(t, "actors of a deleted connection", len(got), 0)
}
