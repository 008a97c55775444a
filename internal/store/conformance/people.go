package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

func testPersonUpsert(t *testing.T, s store.Store) {
	ctx := t.Context()
	p := store.Person{Project: project, ID: "p1", Source: "password", SourceSubject: "alice@example.com",
		Email: "alice@example.com", Name: "Alice", CreatedAt: base}
	got, err := s.UpsertPerson(ctx, p)
	must(t, err)
	equal(t, "created", got, p)

	// Signing in again finds the same person (whatever ID the caller proposed) and refreshes
	// email and name, keeping when they were created.
	again := p
	again.ID, again.Email, again.Name, again.CreatedAt = "p-new", "alice@corp.example", "Alice B.", at(time.Hour)
	got, err = s.UpsertPerson(ctx, again)
	must(t, err)
	want := p
	want.Email, want.Name = again.Email, again.Name
	equal(t, "upserted", got, want)

	got, err = s.GetPerson(ctx, project, "p1")
	must(t, err)
	equal(t, "get", got, want)
	_, err = s.GetPerson(ctx, project, "p-new")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetPerson(ctx, "team-b/main", "p1")
	wantErr(t, err, store.ErrNotFound)

	// The same source identity in another project is another person.
	other := p
	other.Project, other.ID = "team-b/main", "p9"
	got, err = s.UpsertPerson(ctx, other)
	must(t, err)
	equal(t, "other project", got.ID, "p9")
}

func testPersonIDTaken(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.UpsertPerson(ctx, store.Person{Project: project, ID: "p1", Source: "password", SourceSubject: "a@x", CreatedAt: base})
	must(t, err)
	_, err = s.UpsertPerson(ctx, store.Person{Project: project, ID: "p1", Source: "oidc", SourceSubject: "iss|a", CreatedAt: base})
	wantErr(t, err, store.ErrConflict)
}

func testSessionLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	sess := store.Session{IDHash: hash("cookie"), Project: project, Subject: "p1", AuthTime: base,
		CreatedAt: base, ExpiresAt: at(time.Hour), Method: "hwk"}
	must(t, s.CreateSession(ctx, sess))
	wantErr(t, s.CreateSession(ctx, sess), store.ErrConflict)

	got, err := s.GetSession(ctx, sess.IDHash, at(time.Hour-time.Nanosecond))
	must(t, err)
	equal(t, "session", got, sess)

	_, err = s.GetSession(ctx, sess.IDHash, at(time.Hour))
	wantErr(t, err, store.ErrNotFound)
	_, err = s.GetSession(ctx, hash("other"), base)
	wantErr(t, err, store.ErrNotFound)

	must(t, s.DeleteSession(ctx, sess.IDHash))
	_, err = s.GetSession(ctx, sess.IDHash, base)
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, s.DeleteSession(ctx, sess.IDHash), store.ErrNotFound)
}

// ---------------------------------------------------------------------------------------------
// Clients

func newClient(id string, created time.Time) store.Client {
	return store.Client{
		Project: project, ID: id, SecretHash: hash("secret-" + id), RegistrationTokenHash: hash("rat-" + id),
		Name: "Repo Helper", URI: "https://helper.example", LogoURI: "https://helper.example/logo.png",
		RedirectURIs: []string{"https://claude.ai/api/mcp/auth_callback", "http://127.0.0.1/callback"},
		GrantTypes:   []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
		TokenEndpointAuthMethod: "client_secret_basic", Scope: "read write",
		Metadata: []byte(`{"client_name":"Repo Helper"}`), CreatedAt: created, UpdatedAt: created,
	}
}

func testClientRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newClient("c1", base)
	must(t, s.CreateClient(ctx, c))
	wantErr(t, s.CreateClient(ctx, c), store.ErrConflict)
	got, err := s.GetClient(ctx, project, "c1")
	must(t, err)
	equal(t, "client", got, c)

	// A public client has no secret.
	pub := newClient("c2", base)
	pub.SecretHash, pub.TokenEndpointAuthMethod = nil, "none"
	must(t, s.CreateClient(ctx, pub))
	got, err = s.GetClient(ctx, project, "c2")
	must(t, err)
	equal(t, "public client", got, pub)

	_, err = s.GetClient(ctx, "team-b/main", "c1")
	wantErr(t, err, store.ErrNotFound)
}

func testClientUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newClient("c1", base)
	must(t, s.CreateClient(ctx, c))

	got, err := s.UpdateClient(ctx, project, "c1", func(c store.Client) (store.Client, error) {
		c.Name = "Renamed"
		c.RedirectURIs = append(c.RedirectURIs, "https://chatgpt.com/connector_platform_oauth_redirect")
		c.UpdatedAt = at(time.Minute)
		c.ID, c.Project, c.CreatedAt = "hijack", "team-b/main", at(time.Hour) // cannot change
		return c, nil
	})
	must(t, err)
	want := c
	want.Name = "Renamed"
	want.RedirectURIs = append(slices.Clone(c.RedirectURIs), "https://chatgpt.com/connector_platform_oauth_redirect")
	want.UpdatedAt = at(time.Minute)
	equal(t, "returned", got, want)
	got, err = s.GetClient(ctx, project, "c1")
	must(t, err)
	equal(t, "stored", got, want)

	boom := errors.New("boom")
	_, err = s.UpdateClient(ctx, project, "c1", func(c store.Client) (store.Client, error) {
		c.Name = "lost"
		return c, boom
	})
	wantErr(t, err, boom)
	got, err = s.GetClient(ctx, project, "c1")
	must(t, err)
	equal(t, "unchanged after failed update", got, want)

	_, err = s.UpdateClient(ctx, project, "missing", func(c store.Client) (store.Client, error) { return c, nil })
	wantErr(t, err, store.ErrNotFound)
}

func testClientUpdateConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := newClient("c1", base)
	c.RedirectURIs = nil
	must(t, s.CreateClient(ctx, c))
	const n = 20
	errs := make([]error, n)
	parallel(n, func(i int) {
		_, errs[i] = s.UpdateClient(ctx, project, "c1", func(c store.Client) (store.Client, error) {
			c.RedirectURIs = append(c.RedirectURIs, id("https://app.example/cb", i))
			return c, nil
		})
	})
	for _, err := range errs {
		must(t, err)
	}
	got, err := s.GetClient(ctx, project, "c1")
	must(t, err)
	if len(got.RedirectURIs) != n {
		t.Fatalf("lost updates: %d redirect URIs stored, want %d: %v", len(got.RedirectURIs), n, got.RedirectURIs)
	}
}

func testClientList(t *testing.T, s store.Store) {
	ctx := t.Context()
	c2 := newClient("c2", at(time.Second))
	c1 := newClient("c1", at(2*time.Second))
	other := newClient("c3", base)
	other.Project = "team-b/main"
	for _, c := range []store.Client{c2, c1, other} {
		must(t, s.CreateClient(ctx, c))
	}
	got, err := s.ListClients(ctx, project)
	must(t, err)
	equal(t, "clients in creation order", got, []store.Client{c2, c1})
	got, err = s.ListClients(ctx, "team-c/none")
	must(t, err)
	equal(t, "empty project", len(got), 0)
}

func testClientDeleteRevokes(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.CreateClient(ctx, newClient("c1", base)))
	must(t, s.CreateClient(ctx, newClient("c2", base)))
	issue(t, s, "f1", "c1", "alice")
	issue(t, s, "f2", "c1", "bob")
	issue(t, s, "f3", "c2", "alice")
	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c1", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
	conn := saveConnection(t, s, "alice", "github", "1001")
	must(t, s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "alice", Connector: "github", ClientID: "c1", ConnectionID: conn.ID, CreatedAt: base}))

	must(t, s.DeleteClient(ctx, project, "c1", at(time.Minute)))

	_, err := s.GetClient(ctx, project, "c1")
	wantErr(t, err, store.ErrNotFound)
	live, err := s.CountLiveTokens(ctx, project, at(time.Minute))
	must(t, err)
	equal(t, "live tokens after deleting c1", live, map[string]int64{"c2": 2})
	tok, err := s.GetToken(ctx, hash("f1/rt"))
	must(t, err)
	equal(t, "revoked at", tok.RevokedAt, tp(at(time.Minute)))
	_, err = s.GetGrant(ctx, project, "alice", "c1")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.FindPermission(ctx, project, "alice", "github", "c1")
	wantErr(t, err, store.ErrNotFound)

	wantErr(t, s.DeleteClient(ctx, project, "c1", at(time.Minute)), store.ErrNotFound)
}

// ---------------------------------------------------------------------------------------------
// Grants

func testGrantUnion(t *testing.T, s store.Store) {
	ctx := t.Context()
	g := store.Grant{Project: project, Subject: "alice", ClientID: "c1", Scopes: []string{"read", "profile"}, CreatedAt: base, UpdatedAt: base}
	must(t, s.UpsertGrant(ctx, g))
	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c1",
		Scopes: []string{"write", "read"}, CreatedAt: at(time.Hour), UpdatedAt: at(time.Hour)}))
	got, err := s.GetGrant(ctx, project, "alice", "c1")
	must(t, err)
	equal(t, "grant", got, store.Grant{Project: project, Subject: "alice", ClientID: "c1",
		Scopes: []string{"read", "profile", "write"}, CreatedAt: base, UpdatedAt: at(time.Hour)})

	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c0", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "bob", ClientID: "c1", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
	list, err := s.ListGrants(ctx, project, "alice")
	must(t, err)
	if len(list) != 2 || list[0].ClientID != "c0" || list[1].ClientID != "c1" {
		t.Fatalf("ListGrants = %+v, want c0 then c1", list)
	}
	_, err = s.GetGrant(ctx, project, "carol", "c1")
	wantErr(t, err, store.ErrNotFound)
}

func testGrantUpsertConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 10
	errs := make([]error, n)
	parallel(n, func(i int) {
		errs[i] = s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c1",
			Scopes: []string{id("scope", i)}, CreatedAt: base, UpdatedAt: base})
	})
	for _, err := range errs {
		must(t, err)
	}
	got, err := s.GetGrant(ctx, project, "alice", "c1")
	must(t, err)
	if len(got.Scopes) != n {
		t.Fatalf("scopes = %v, want all %d", got.Scopes, n)
	}
}

func testGrantDeleteRevokes(t *testing.T, s store.Store) {
	ctx := t.Context()
	must(t, s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c1", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
	issue(t, s, "a1", "c1", "alice")
	issue(t, s, "a2", "c1", "alice")
	issue(t, s, "b1", "c1", "bob")
	issue(t, s, "a3", "c2", "alice")

	must(t, s.DeleteGrant(ctx, project, "alice", "c1", at(time.Minute)))
	_, err := s.GetGrant(ctx, project, "alice", "c1")
	wantErr(t, err, store.ErrNotFound)
	for _, h := range []string{"a1/at", "a1/rt", "a2/at", "a2/rt"} {
		tok, err := s.GetToken(ctx, hash(h))
		must(t, err)
		if tok.Active(at(time.Minute)) {
			t.Fatalf("%s still active after the grant was withdrawn", h)
		}
	}
	for _, h := range []string{"b1/rt", "a3/rt"} {
		tok, err := s.GetToken(ctx, hash(h))
		must(t, err)
		if !tok.Active(at(time.Minute)) {
			t.Fatalf("%s (another person or client) was revoked", h)
		}
	}
	// Nothing left to withdraw.
	wantErr(t, s.DeleteGrant(ctx, project, "alice", "c1", at(time.Minute)), store.ErrNotFound)
	// Tokens without a stored grant are still ended.
	must(t, s.DeleteGrant(ctx, project, "alice", "c2", at(time.Minute)))
	live, err := s.CountLiveTokens(ctx, project, at(time.Minute))
	must(t, err)
	equal(t, "live", live, map[string]int64{"c1": 2})
}

func testPersonFind(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.FindPerson(ctx, project, "id-jag", "https://idp.example|u1")
	wantErr(t, err, store.ErrNotFound)
	p := store.Person{Project: project, ID: "p1", Source: "id-jag", SourceSubject: "https://idp.example|u1",
		Email: "alice@example.com", Name: "Alice", CreatedAt: base}
	_, err = s.UpsertPerson(ctx, p)
	must(t, err)
	got, err := s.FindPerson(ctx, project, "id-jag", "https://idp.example|u1")
	must(t, err)
	equal(t, "found", got, p)
	// Another source, or another project, with the same subject is someone else.
	_, err = s.FindPerson(ctx, project, "oidc", "https://idp.example|u1")
	wantErr(t, err, store.ErrNotFound)
	_, err = s.FindPerson(ctx, "team-b/main", "id-jag", "https://idp.example|u1")
	wantErr(t, err, store.ErrNotFound)
}
