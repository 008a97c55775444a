package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"latchkey.dev/latchkey/internal/admintest"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

func project(ns, name string) *config.Project {
	return &config.Project{Key: ns + "/" + name, Namespace: ns, Name: name, Connectors: map[string]*config.Connector{},
		Clients: map[string]*config.Client{"lkc_repohelper": {ID: "lkc_repohelper", Name: "Repo Helper"}}}
}

// seed gives each person a session, a grant to Repo Helper with two tokens, and a GitHub
// connection.
func seed(t *testing.T, st store.Store, projectKey, id, email string, now time.Time) {
	t.Helper()
	ctx := t.Context()
	_, err := st.UpsertPerson(ctx, store.Person{Project: projectKey, ID: id, Source: "password", SourceSubject: email, Email: email, CreatedAt: now})
	must(t, err)
	must(t, st.CreateSession(ctx, store.Session{IDHash: []byte("s-" + id), Project: projectKey, Subject: id, AuthTime: now, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}))
	must(t, st.UpsertGrant(ctx, store.Grant{Project: projectKey, Subject: id, ClientID: "lkc_repohelper", Scopes: []string{"openid", "repo"}, CreatedAt: now, UpdatedAt: now}))
	must(t, st.CreateTokens(ctx,
		store.Token{Hash: []byte("at-" + id), Kind: store.AccessToken, Project: projectKey, ClientID: "lkc_repohelper", Subject: id, FamilyID: "f-" + id, IssuedAt: now, ExpiresAt: now.Add(time.Hour)},
		store.Token{Hash: []byte("rt-" + id), Kind: store.RefreshToken, Project: projectKey, ClientID: "lkc_repohelper", Subject: id, FamilyID: "f-" + id, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour)}))
	_, err = st.SaveConnection(ctx, store.Connection{ID: "conn-" + id, Project: projectKey, Subject: id, Connector: "github",
		AccountID: "1", AccountName: id + "-gh", KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
	must(t, err)
	for i, name := range []string{"Passkey 1", "Passkey 2"} {
		must(t, st.AddPasskey(ctx, store.Passkey{Project: projectKey, CredentialID: []byte{0xfb, 0xff, byte(i), id[0]}, Subject: id,
			Name: name, PublicKey: []byte("cose"), AttestationFormat: "none", UserVerified: true, BackupEligible: i == 0, CreatedAt: now}))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPlugin drives kubectl latchkey as two users through a real kube-apiserver: the cluster
// admin sees every namespace; the tenant admin of team-a works in team-a and is refused by RBAC
// in team-b.
func TestPlugin(t *testing.T) {
	now := time.Now()
	e := admintest.Start(t, []*config.Project{project("team-a", "demo"), project("team-b", "demo")}, nil)
	seed(t, e.Store, "team-a/demo", "alice", "alice@example.com", now)
	seed(t, e.Store, "team-b/demo", "bob", "bob@example.com", now)
	ada, tina := e.Kubeconfig(t, "ada"), e.Kubeconfig(t, "tina")

	kl := func(kubeconfig string, args ...string) (string, error) {
		var out bytes.Buffer
		// The kubeconfig first: anything after "--" is an argument.
		err := run(t.Context(), append([]string{"--kubeconfig", kubeconfig}, args...), &out)
		return out.String(), err
	}
	ok := func(kubeconfig string, args ...string) string {
		t.Helper()
		out, err := kl(kubeconfig, args...)
		if err != nil {
			t.Fatalf("kubectl latchkey %v: %v\n%s", args, err, out)
		}
		return out
	}
	contains := func(what, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Fatalf("%s: no %q in\n%s", what, w, out)
			}
		}
	}

	out := ok(ada, "people", "-A")
	contains("ada: people -A", out, "NAMESPACE", "team-a", "alice@example.com", "team-b", "bob@example.com")
	out = ok(tina, "connections", "-n", "team-a", "--person", "alice@example.com")
	contains("tina: alice's connections", out, "PERSON", "alice@example.com", "alice-gh", "STATE", "active")
	out = ok(tina, "grants", "-n", "team-a", "--project", "demo")
	contains("tina: grants", out, "Repo Helper", "openid repo", "2")
	out = ok(tina, "tokens", "-n", "team-a")
	contains("tina: tokens", out, "Repo Helper", "2")

	// JSON and YAML are lists of the API's objects.
	out = ok(tina, "connections", "-n", "team-a", "-o", "json")
	var list struct {
		Items []struct {
			Account string `json:"account"`
		} `json:"items"`
	}
	must(t, json.Unmarshal([]byte(out), &list))
	if len(list.Items) != 1 || list.Items[0].Account != "alice-gh" {
		t.Fatalf("-o json: %s", out)
	}
	out = ok(tina, "people", "-n", "team-a", "-o", "yaml")
	var y map[string]any
	must(t, yaml.Unmarshal([]byte(out), &y))
	contains("-o yaml", out, "kind: List", "email: alice@example.com")

	// The tenant admin in the next namespace: refused by the kube-apiserver's RBAC.
	for _, args := range [][]string{
		{"connections", "-n", "team-b"},
		{"people", "-A"},
		{"revoke", "person", "bob@example.com", "-n", "team-b"},
		{"revoke", "connection", "conn-bob", "-n", "team-b"},
		{"revoke", "client-tokens", "lkc_repohelper", "-n", "team-b"},
		{"passkeys", "-n", "team-b"},
		{"revoke", "passkey", "-n", "team-b", "--", "-_8AYg"},
	} {
		out, err := kl(tina, args...)
		if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "Forbidden") {
			t.Fatalf("tina %v: %v\n%s", args, err, out)
		}
	}
	if tok, _ := e.Store.GetToken(t.Context(), []byte("rt-bob")); !tok.Active(time.Now()) {
		t.Fatal("bob's token was revoked by a refused command")
	}
	if keys, _ := e.Store.ListPasskeys(t.Context(), "team-b/demo", "bob"); len(keys) != 2 {
		t.Fatalf("bob's passkeys after refused commands: %d", len(keys))
	}

	// The tenant admin lists alice's passkeys, removes one by its name (after "--": it starts
	// with a dash), then the rest.
	out = ok(tina, "passkeys", "-n", "team-a", "--person", "alice@example.com")
	contains("tina: alice's passkeys", out, "PERSON", "SYNCED", "alice@example.com", "Passkey 1", "Passkey 2", "-_8AYQ", "-_8BYQ")
	out = ok(tina, "revoke", "passkey", "-n", "team-a", "--", "-_8BYQ")
	contains("revoke passkey", out, "passkey -_8BYQ removed", `"Passkey 2"`)
	out = ok(tina, "revoke", "passkeys", "alice@example.com", "-n", "team-a", "--dry-run")
	contains("revoke passkeys --dry-run", out, "1 passkeys of alice@example.com removed (server dry run)")
	out = ok(tina, "revoke", "passkeys", "alice@example.com", "-n", "team-a")
	contains("revoke passkeys", out, "1 passkeys of alice@example.com removed")
	if keys, _ := e.Store.ListPasskeys(t.Context(), "team-a/demo", "alice"); len(keys) != 0 {
		t.Fatalf("alice's passkeys after revoke passkeys: %d", len(keys))
	}
	if _, err := kl(tina, "revoke", "passkey", "-n", "team-a", "--", "-_8BYQ"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("removing a removed passkey: %v", err)
	}

	// audit --follow shows the tenant admin's action as it happens.
	ctx, cancel := context.WithCancel(t.Context())
	var follow syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"audit", "--follow", "--interval", "100ms", "-n", "team-a", "--kubeconfig", ada}, &follow)
	}()

	out = ok(tina, "revoke", "person", "alice@example.com", "-n", "team-a", "--dry-run")
	contains("dry run", out, "dry run")
	if tok, _ := e.Store.GetToken(t.Context(), []byte("rt-alice")); !tok.Active(time.Now()) {
		t.Fatal("a dry run revoked a token")
	}
	out = ok(tina, "revoke", "person", "alice@example.com", "-n", "team-a")
	contains("revoke person", out, "access of alice@example.com ended", "2 tokens", "1 connections")
	if tok, _ := e.Store.GetToken(t.Context(), []byte("rt-alice")); tok.Active(time.Now()) {
		t.Fatal("alice's token survived")
	}
	out = ok(tina, "connections", "-n", "team-a")
	contains("after", out, "No connections found")

	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(follow.String(), "admin.person.access_ended") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("audit --follow: %v", err)
	}
	contains("audit --follow", follow.String(), "ACTION", "kubernetes:tina", "admin.person.access_ended", "person:alice", "tokens=2")

	// The cluster admin revokes bob's grant by person and client name, then the client's tokens.
	out = ok(ada, "revoke", "grant", "bob@example.com", "Repo Helper", "-n", "team-b")
	contains("revoke grant", out, "revoked")
	if _, err := kl(ada, "revoke", "client-tokens", "lkc_repohelper", "-n", "team-b"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("client tokens after the grant was revoked: %v", err)
	}
	out = ok(ada, "audit", "-A", "--action", "admin.grant.revoked")
	contains("audit filtered", out, "team-b", "kubernetes:ada", "client_id=lkc_repohelper")
	if strings.Contains(out, "access_ended") {
		t.Fatalf("the action filter let another action through:\n%s", out)
	}
}

// syncBuffer is a bytes.Buffer safe to write from the follow goroutine while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A record that becomes visible after records with higher ids (a batch committed late) is
// still printed, once; records read again by the overlapping polls are not printed twice.
func TestFollowCursor(t *testing.T) {
	var c cursor
	var printed []int64
	poll := func(visible ...int64) {
		from := c.after()
		for _, id := range visible {
			if id > from && c.fresh(id) {
				printed = append(printed, id)
			}
		}
	}
	poll(1, 2, 3, 10)                           // 4–9 are a batch not committed yet
	poll(1, 2, 3, 10, 11)                       // again: only 11 is new
	poll(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12) // the batch is visible now
	poll(1500, 1600)
	poll(5, 1500, 1600, 1601) // 5 is below the overlap by now: not asked for, not printed again
	want := []int64{1, 2, 3, 10, 11, 4, 5, 6, 7, 8, 9, 12, 1500, 1600, 1601}
	if fmt.Sprint(printed) != fmt.Sprint(want) {
		t.Fatalf("printed %v, want %v", printed, want)
	}
	if c.after() != 601 {
		t.Fatalf("asks after %d, want 601", c.after())
	}
	if len(c.seen) > 4 {
		t.Fatalf("remembers %d ids, want only those within the overlap", len(c.seen))
	}
}
