package sqlstore

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// RevokeApp is one transaction: when its last statement (deleting the client's permissions)
// fails, the grant it deleted and the tokens it revoked before are back as they were. A
// trigger makes that statement fail, which no store method can do on purpose.
func TestRevokeAppIsAtomic(t *testing.T) {
	backends := map[string]func(t testing.TB) string{"sqlite": sqliteDSN}
	if os.Getenv("LATCHKEY_TEST_POSTGRES_DSN") != "" && !testing.Short() {
		backends["postgres"] = postgresDSN
	}
	triggers := map[string][]string{
		"sqlite": {`CREATE TRIGGER refuse_permission_delete BEFORE DELETE ON agent_permissions
BEGIN SELECT RAISE(ABORT, 'permission deletes refused'); END`},
		"postgres": {
			`CREATE FUNCTION refuse_permission_delete() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'permission deletes refused'; END $$`,
			`CREATE TRIGGER refuse_permission_delete BEFORE DELETE ON agent_permissions
FOR EACH ROW EXECUTE FUNCTION refuse_permission_delete()`,
		},
	}
	for name, dsn := range backends {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTest(t, dsn(t))
			base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			const project = "team-a/main"
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(s.UpsertGrant(ctx, store.Grant{Project: project, Subject: "alice", ClientID: "c1", Scopes: []string{"read"}, CreatedAt: base, UpdatedAt: base}))
			tok := store.Token{Hash: hashOf("a1"), Kind: store.AccessToken, Project: project, ClientID: "c1", Subject: "alice",
				FamilyID: "f1", IssuedAt: base, ExpiresAt: base.Add(time.Hour)}
			must(s.CreateTokens(ctx, tok))
			conn, err := s.SaveConnection(ctx, store.Connection{ID: "conn-1", Project: project, Subject: "alice", Connector: "github",
				AccountID: "1001", AccountName: "alice", KeyID: "k1", AccessToken: []byte("sealed"), TokenType: "bearer",
				Status: store.ConnectionActive, CreatedAt: base, UpdatedAt: base})
			must(err)
			must(s.AllowAgent(ctx, store.AgentPermission{Project: project, Subject: "alice", Connector: "github", ClientID: "c1",
				ConnectionID: conn.ID, CreatedAt: base}))
			for _, stmt := range triggers[name] {
				if _, err := s.w.ExecContext(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}

			now := base.Add(time.Minute)
			if err := s.RevokeApp(ctx, project, "alice", "c1", now); err == nil || errors.Is(err, store.ErrNotFound) {
				t.Fatalf("RevokeApp with its last statement failing = %v, want that failure", err)
			}
			if _, err := s.GetGrant(ctx, project, "alice", "c1"); err != nil {
				t.Errorf("the grant is gone after a failed RevokeApp: %v", err)
			}
			got, err := s.GetToken(ctx, hashOf("a1"))
			must(err)
			if !got.Active(now) {
				t.Error("the token was revoked by a failed RevokeApp")
			}
			if _, err := s.FindPermission(ctx, project, "alice", "github", "c1"); err != nil {
				t.Errorf("the permission is gone after a failed RevokeApp: %v", err)
			}
		})
	}
}
