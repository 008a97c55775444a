package upstream_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/store/sql/pgtest"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
)

const project = "default/acme"

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	s, err := sqlstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "latchkey.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func keyring(t *testing.T, primary string, ids ...string) *secret.Keyring {
	t.Helper()
	keys := map[string][]byte{}
	for _, id := range ids {
		keys[id] = bytes.Repeat([]byte(id[:1]), 32)
	}
	k, err := secret.NewKeyring(keys, primary)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type vaultEnv struct {
	*gh
	st store.Store
	v  *upstream.Vault
}

func newVaultEnv(t *testing.T, ttl time.Duration) *vaultEnv {
	g := newGitHub(t, ttl)
	st := openSQLite(t)
	return &vaultEnv{gh: g, st: st, v: &upstream.Vault{Store: st, Keyring: keyring(t, "a", "a"), Now: g.clk.Now}}
}

// connect runs the whole connection flow for login and stores the connection, as the callback
// handler does.
func (e *vaultEnv) connect(t *testing.T, login string) store.Connection {
	t.Helper()
	verifier := upstream.NewVerifier()
	q := e.authorize(t, login, "s", verifier)
	acct, tok, err := upstream.Exchange(t.Context(), nil, e.c, q.Get("code"), verifier)
	if err != nil {
		t.Fatal(err)
	}
	now := e.clk.Now()
	conn := store.Connection{
		ID: "conn-" + login, Project: project, Subject: "person-" + login, Connector: e.c.Key,
		AccountID: acct.ID, AccountName: acct.Name, CreatedAt: now, UpdatedAt: now,
	}
	e.v.Seal(&conn, tok)
	saved, err := e.st.SaveConnection(t.Context(), conn)
	if err != nil {
		t.Fatal(err)
	}
	return saved
}

func (e *vaultEnv) stored(t *testing.T, id string) store.Connection {
	t.Helper()
	c, err := e.st.GetConnection(t.Context(), project, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// works reports whether the service accepts at.
func (e *vaultEnv) works(t *testing.T, at string) bool {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/user", nil)
	req.Header.Set("Authorization", "Bearer "+at)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func TestSealStoresNothingInTheClear(t *testing.T) {
	e := newVaultEnv(t, time.Hour)
	conn := e.connect(t, "alice")
	if conn.KeyID != "a" || conn.TokenType == "" || len(conn.RefreshToken) == 0 || conn.Expiry == nil {
		t.Fatalf("sealed connection %+v", conn)
	}
	if want := e.clk.Now().Add(time.Hour); !conn.Expiry.Equal(want) {
		t.Fatalf("expiry %v, want %v (from expires_in on the injected clock)", conn.Expiry, want)
	}
	if got := conn.Scopes; len(got) != 2 || got[0] != "repo" || got[1] != "read:user" {
		t.Fatalf("scopes %q", got)
	}
	tok, err := e.v.Token(t.Context(), e.c, project, conn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(conn.AccessToken, []byte(tok.AccessToken)) || bytes.Contains(conn.RefreshToken, []byte("ghr_")) {
		t.Fatal("a token is stored in the clear")
	}
	if tok.RefreshToken != "" {
		t.Fatal("Token handed out the refresh token")
	}

	// A sealed token moved to another person's row does not open there.
	other := e.connect(t, "bob")
	if _, err := e.st.UpdateConnection(t.Context(), project, other.ID, func(c store.Connection) (store.Connection, error) {
		c.AccessToken, c.RefreshToken = conn.AccessToken, conn.RefreshToken
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.v.Token(t.Context(), e.c, project, other.ID); !errors.Is(err, secret.ErrOpen) {
		t.Fatalf("transplanted token: %v, want secret.ErrOpen", err)
	}
}

func TestTokenValidIsReturnedWithoutRefresh(t *testing.T) {
	e := newVaultEnv(t, time.Hour)
	conn := e.connect(t, "alice")
	e.clk.Advance(59 * time.Minute) // still more than the skew away from expiry
	tok, err := e.v.Token(t.Context(), e.c, project, conn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !e.works(t, tok.AccessToken) || e.fake.RefreshCalls() != 0 {
		t.Fatalf("refresh calls %d", e.fake.RefreshCalls())
	}
	if !tok.Expiry.Equal(*conn.Expiry) {
		t.Fatalf("expiry %v, want %v", tok.Expiry, conn.Expiry)
	}
}

func TestTokenClassicNeverExpires(t *testing.T) {
	e := newVaultEnv(t, 0)
	conn := e.connect(t, "alice")
	if conn.Expiry != nil || conn.RefreshToken != nil {
		t.Fatalf("classic OAuth app token stored with expiry %v / refresh %v", conn.Expiry, conn.RefreshToken)
	}
	e.clk.Advance(365 * 24 * time.Hour)
	tok, err := e.v.Token(t.Context(), e.c, project, conn.ID)
	if err != nil || !e.works(t, tok.AccessToken) || e.fake.RefreshCalls() != 0 {
		t.Fatalf("classic token: %v", err)
	}
}

func TestTokenExpiredRefreshesOnce(t *testing.T) {
	e := newVaultEnv(t, time.Hour)
	conn := e.connect(t, "alice")
	first, _ := e.v.Token(t.Context(), e.c, project, conn.ID)

	e.clk.Advance(time.Hour - 10*time.Second) // inside the skew: treated as expired
	tok, err := e.v.Token(t.Context(), e.c, project, conn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tok.AccessToken == first.AccessToken || !e.works(t, tok.AccessToken) || e.fake.RefreshCalls() != 1 {
		t.Fatalf("after expiry: same token %v, refresh calls %d", tok.AccessToken == first.AccessToken, e.fake.RefreshCalls())
	}
	row := e.stored(t, conn.ID)
	if row.Status != store.ConnectionActive || !row.Expiry.Equal(e.clk.Now().Add(time.Hour)) || !row.UpdatedAt.Equal(e.clk.Now()) {
		t.Fatalf("row after refresh %+v", row)
	}
	// The new token is now the fresh one: no further refresh.
	again, err := e.v.Token(t.Context(), e.c, project, conn.ID)
	if err != nil || again.AccessToken != tok.AccessToken || e.fake.RefreshCalls() != 1 {
		t.Fatalf("second call: %v, refresh calls %d", err, e.fake.RefreshCalls())
	}
}

// Fifty requests arrive together for one expired connection, through several vaults (as on
// several server processes sharing the store's lock): the service sees one refresh, everyone
// gets the same new token, and the rotated refresh token is what is stored.
func TestTokenConcurrentRefreshIsSingle(t *testing.T) {
	e := newVaultEnv(t, time.Hour)
	conn := e.connect(t, "alice")
	e.clk.Advance(2 * time.Hour)
	e.fake.SetDelay(20 * time.Millisecond) // let the callers pile up behind the first refresh

	vaults := make([]*upstream.Vault, 5)
	for i := range vaults {
		vaults[i] = &upstream.Vault{Store: e.st, Keyring: e.v.Keyring, Now: e.clk.Now}
	}
	const n = 50
	var wg sync.WaitGroup
	toks := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			tok, err := vaults[i%len(vaults)].Token(t.Context(), e.c, project, conn.ID)
			errs[i] = err
			if err == nil {
				toks[i] = tok.AccessToken
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if toks[i] != toks[0] {
			t.Fatalf("request %d got a different token", i)
		}
	}
	if got := e.fake.RefreshCalls(); got != 1 {
		t.Fatalf("upstream refresh calls = %d, want 1", got)
	}
	if !e.works(t, toks[0]) {
		t.Fatal("the shared token does not work")
	}

	// The stored refresh token is the rotated one: the next expiry refreshes successfully.
	e.fake.SetDelay(0)
	e.clk.Advance(2 * time.Hour)
	tok, err := e.v.Token(t.Context(), e.c, project, conn.ID)
	if err != nil || !e.works(t, tok.AccessToken) || e.fake.RefreshCalls() != 2 {
		t.Fatalf("next refresh: %v, calls %d", err, e.fake.RefreshCalls())
	}
}

func TestTokenRejectedRefreshNeedsReconnect(t *testing.T) {
	for name, reject := range map[string]func(e *vaultEnv){
		"service refuses refreshes": func(e *vaultEnv) { e.fake.SetFailRefresh(true) },
		"person revoked the app":    func(e *vaultEnv) { e.fake.RevokeAll("alice") },
	} {
		t.Run(name, func(t *testing.T) {
			e := newVaultEnv(t, time.Hour)
			conn := e.connect(t, "alice")
			reject(e)
			e.clk.Advance(2 * time.Hour)
			if _, err := e.v.Token(t.Context(), e.c, project, conn.ID); !errors.Is(err, upstream.ErrReconnect) {
				t.Fatalf("rejected refresh: %v, want ErrReconnect", err)
			}
			if row := e.stored(t, conn.ID); row.Status != store.ConnectionRevokedUpstream {
				t.Fatalf("status %q, want revoked_upstream", row.Status)
			}
			// Broken stays broken without asking the service again.
			calls := e.fake.RefreshCalls()
			e.fake.SetFailRefresh(false)
			if _, err := e.v.Token(t.Context(), e.c, project, conn.ID); !errors.Is(err, upstream.ErrReconnect) || e.fake.RefreshCalls() != calls {
				t.Fatalf("broken connection: %v, calls %d → %d", err, calls, e.fake.RefreshCalls())
			}
			// Reconnecting the same account mends it in place.
			again := e.connect(t, "alice")
			if again.ID != conn.ID || again.Status != store.ConnectionActive {
				t.Fatalf("reconnect: %+v", again)
			}
			if _, err := e.v.Token(t.Context(), e.c, project, conn.ID); err != nil {
				t.Fatalf("after reconnect: %v", err)
			}
		})
	}
}

// Standard-shaped answers from other services: only a refusal of the grant itself breaks the
// connection; a refusal of our client does not (reconnecting would not fix it).
func TestTokenRefreshErrorsOfGenericServices(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   error
		broken bool
	}{
		{"invalid_grant", 400, `{"error":"invalid_grant","error_description":"revoked"}`, upstream.ErrReconnect, true},
		{"bare 401", 401, ``, upstream.ErrReconnect, true},
		{"bare 400", 400, `not json`, upstream.ErrReconnect, true},
		{"invalid_client", 401, `{"error":"invalid_client"}`, upstream.ErrService, false},
		{"unauthorized_client", 400, `{"error":"unauthorized_client"}`, upstream.ErrService, false},
		{"server error", 503, `{"error":"temporarily_unavailable"}`, upstream.ErrService, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
			st := openSQLite(t)
			v := &upstream.Vault{Store: st, Keyring: keyring(t, "a", "a"), Now: clk.Now}
			c := &config.Connector{AllowedNetworks: netguard.Loopback, Key: "default/svc", ClientID: "c", ClientSecret: "s", TokenURL: srv.URL, CallbackURL: callbackURL}
			conn := store.Connection{ID: "c1", Project: project, Subject: "p", Connector: c.Key, AccountID: "1", CreatedAt: clk.Now()}
			v.Seal(&conn, &oauth2.Token{AccessToken: "at", RefreshToken: "rt", ExpiresIn: 60})
			if _, err := st.SaveConnection(t.Context(), conn); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Hour)
			_, err := v.Token(t.Context(), c, project, "c1")
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			row, _ := st.GetConnection(t.Context(), project, "c1")
			if (row.Status == store.ConnectionRevokedUpstream) != tt.broken {
				t.Fatalf("status %q, broken want %v", row.Status, tt.broken)
			}
		})
	}
}

func TestTokenExpiredWithoutRefreshTokenNeedsReconnect(t *testing.T) {
	clk := testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	st := openSQLite(t)
	v := &upstream.Vault{Store: st, Keyring: keyring(t, "a", "a"), Now: clk.Now}
	c := &config.Connector{AllowedNetworks: netguard.Loopback, Key: "default/svc", TokenURL: "http://127.0.0.1:1/never-called"}
	conn := store.Connection{ID: "c1", Project: project, Subject: "p", Connector: c.Key, AccountID: "1", CreatedAt: clk.Now()}
	v.Seal(&conn, &oauth2.Token{AccessToken: "at", ExpiresIn: 60})
	if _, err := st.SaveConnection(t.Context(), conn); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, err := v.Token(t.Context(), c, project, "c1"); !errors.Is(err, upstream.ErrReconnect) {
		t.Fatalf("got %v", err)
	}
	if row, _ := st.GetConnection(t.Context(), project, "c1"); row.Status != store.ConnectionNeedsReconnect {
		t.Fatalf("status %q, want needs_reconnect", row.Status)
	}
}

func TestTokenKeyRotation(t *testing.T) {
	e := newVaultEnv(t, time.Hour)
	conn := e.connect(t, "alice") // sealed with key a
	if conn.KeyID != "a" {
		t.Fatalf("key %q", conn.KeyID)
	}
	// The ring gains b as primary; a stays to open old rows.
	e.v = &upstream.Vault{Store: e.st, Keyring: keyring(t, "b", "a", "b"), Now: e.clk.Now}
	tok, err := e.v.Token(t.Context(), e.c, project, conn.ID)
	if err != nil || !e.works(t, tok.AccessToken) {
		t.Fatalf("old row under the new ring: %v", err)
	}
	if row := e.stored(t, conn.ID); row.KeyID != "a" {
		t.Fatalf("a fresh token was re-sealed without need: key %q", row.KeyID)
	}
	e.clk.Advance(2 * time.Hour)
	if _, err := e.v.Token(t.Context(), e.c, project, conn.ID); err != nil {
		t.Fatal(err)
	}
	if row := e.stored(t, conn.ID); row.KeyID != "b" {
		t.Fatalf("after refresh the row is sealed with %q, want b", row.KeyID)
	}
	// Key a can now be retired.
	e.v = &upstream.Vault{Store: e.st, Keyring: keyring(t, "b", "b"), Now: e.clk.Now}
	if tok, err := e.v.Token(t.Context(), e.c, project, conn.ID); err != nil || !e.works(t, tok.AccessToken) {
		t.Fatalf("after retiring a: %v", err)
	}
	// A row sealed with a key the ring no longer holds says so.
	other := e.connect(t, "bob") // sealed with b
	e.v = &upstream.Vault{Store: e.st, Keyring: keyring(t, "c", "c"), Now: e.clk.Now}
	if _, err := e.v.Token(t.Context(), e.c, project, other.ID); !errors.Is(err, secret.ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestTokenUpstreamTimeoutIsBounded(t *testing.T) {
	e := newVaultEnv(t, time.Hour)
	conn := e.connect(t, "alice")
	before := e.stored(t, conn.ID)
	e.clk.Advance(2 * time.Hour)
	e.fake.SetDelay(time.Hour)
	e.v.Timeout = 100 * time.Millisecond
	if _, err := e.v.Token(t.Context(), e.c, project, conn.ID); !errors.Is(err, upstream.ErrTimeout) {
		t.Fatalf("slow service: %v, want ErrTimeout", err)
	}
	// A timeout may pass: the connection is expiring, not broken, and keeps its tokens.
	after := e.stored(t, conn.ID)
	if after.Status != store.ConnectionExpiring || !bytes.Equal(after.RefreshToken, before.RefreshToken) {
		t.Fatalf("after a timeout: status %q, refresh token kept %v", after.Status, bytes.Equal(after.RefreshToken, before.RefreshToken))
	}
	// Nothing was lost: once the service answers, the refresh works.
	e.fake.SetDelay(0)
	if tok, err := e.v.Token(t.Context(), e.c, project, conn.ID); err != nil || !e.works(t, tok.AccessToken) {
		t.Fatalf("after the service recovers: %v", err)
	}
	if row := e.stored(t, conn.ID); row.Status != store.ConnectionActive {
		t.Fatalf("after the service recovers: status %q", row.Status)
	}
}

func TestTokenLookupErrors(t *testing.T) {
	e := newVaultEnv(t, time.Hour)
	conn := e.connect(t, "alice")
	if _, err := e.v.Token(t.Context(), e.c, project, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown connection: %v", err)
	}
	other := *e.c
	other.Key = "default/gitlab"
	if _, err := e.v.Token(t.Context(), &other, project, conn.ID); err == nil {
		t.Fatal("a connection was handed out for another connector")
	}
	// A caller that has given up gets its own error, not a refresh.
	e.clk.Advance(2 * time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.v.Token(ctx, e.c, project, conn.ID); !errors.Is(err, context.Canceled) || e.fake.RefreshCalls() != 0 {
		t.Fatalf("cancelled caller: %v, refresh calls %d", err, e.fake.RefreshCalls())
	}
}

func TestRevokeGitHub(t *testing.T) {
	e := newVaultEnv(t, 0)
	conn := e.connect(t, "alice")
	if !e.fake.Approved("alice", e.c.ClientID) || e.fake.ActiveTokens("alice") != 1 {
		t.Fatal("setup")
	}
	if err := e.v.Revoke(t.Context(), e.c, conn); err != nil {
		t.Fatal(err)
	}
	if e.fake.ActiveTokens("alice") != 0 || e.fake.Approved("alice", e.c.ClientID) {
		t.Fatal("GitHub still holds the grant")
	}
	// Revoking what is already gone is not an error.
	if err := e.v.Revoke(t.Context(), e.c, conn); err != nil {
		t.Fatalf("second revoke: %v", err)
	}
	noRevocation := *e.c
	noRevocation.RevocationURL = ""
	if err := e.v.Revoke(t.Context(), &noRevocation, conn); err != nil {
		t.Fatal(err)
	}
}

func TestRevokeRFC7009(t *testing.T) {
	var mu sync.Mutex
	var got []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		mu.Lock()
		got = append(got, r.PostForm)
		mu.Unlock()
	}))
	defer srv.Close()
	clk := testclock.New(time.Now())
	v := &upstream.Vault{Keyring: keyring(t, "a", "a"), Now: clk.Now}
	c := &config.Connector{AllowedNetworks: netguard.Loopback, Key: "default/svc", ClientID: "c", ClientSecret: "s", RevocationURL: srv.URL}
	conn := store.Connection{ID: "c1", Project: project, Subject: "p", Connector: c.Key, AccountID: "1"}
	v.Seal(&conn, &oauth2.Token{AccessToken: "at", RefreshToken: "rt"})
	if err := v.Revoke(t.Context(), c, conn); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Get("token") != "rt" || got[0].Get("token_type_hint") != "refresh_token" ||
		got[1].Get("token") != "at" || got[1].Get("client_id") != "c" || got[1].Get("client_secret") != "s" {
		t.Fatalf("revocation requests %v", got)
	}
}

// Several replicas on one PostgreSQL database: the row lock, not a process-local lock, keeps
// the refresh single.
func TestTokenConcurrentRefreshAcrossReplicasPostgres(t *testing.T) {
	dsn := postgresDSN(t)
	g := newGitHub(t, time.Hour)
	ring := keyring(t, "a", "a")
	var vaults []*upstream.Vault
	var first store.Store
	for range 3 {
		st, err := sqlstore.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if first == nil {
			first = st
		}
		vaults = append(vaults, &upstream.Vault{Store: st, Keyring: ring, Now: g.clk.Now})
	}
	e := &vaultEnv{gh: g, st: first, v: vaults[0]}
	conn := e.connect(t, "alice")
	e.clk.Advance(2 * time.Hour)
	e.fake.SetDelay(20 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = vaults[i%len(vaults)].Token(t.Context(), e.c, project, conn.ID)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if got := e.fake.RefreshCalls(); got != 1 {
		t.Fatalf("upstream refresh calls = %d, want 1", got)
	}
}

// postgresDSN gives one test its own schema (internal/store/sql/pgtest).
func postgresDSN(t *testing.T) string { return pgtest.DSN(t) }
