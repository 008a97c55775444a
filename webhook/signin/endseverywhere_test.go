package signin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/exchange"
	"latchkey.dev/latchkey/webhook/idjag"
)

// Access that ends, ends everywhere (docs/leavers.md, "Every way in"): for every way a person's
// access ends, every way back in that they or their agent held before the end is refused
// afterwards, and an upstream callback that is under way when access ends saves nothing.
//
// The installation is test/stack with the connector flows' parts (Options.Audit): it has the fake
// GitHub for connections, and its issuer is on "localhost", which passkeys need. The agent is a
// declared confidential client that may exchange tokens for GitHub and ask for ID-JAGs.
//
// A row with nothing ended runs every way in first, so no cell passes because its way in never
// worked.
func TestAccessEndsEverywhere(t *testing.T) {
	t.Parallel()
	type row struct {
		name string
		oidc bool           // the person signs in with the project's OpenID provider
		prep func(*endsEnv) // before the ways in are opened that must be young at the end
		end  func(*endsEnv) // runs while the upstream callback is under way; nil ends nothing
	}
	rows := []row{
		{name: "nothing ends"},
		{name: "back-channel logout", oidc: true, end: func(e *endsEnv) {
			if r := e.postLogout(e.idp.Sign(e.idp.Key, "idp", "logout+jwt", e.idp.LogoutClaims("alice-1"))); r.Status != http.StatusOK {
				e.t.Fatalf("logout: %d %s", r.Status, r.Raw)
			}
		}},
		{name: "failed re-check", oidc: true,
			prep: func(e *endsEnv) {
				// Disabled at the provider, and the provider's last word older than the interval.
				e.idp.Disable("alice-1")
				e.h.Clock.Advance(11 * time.Minute)
			},
			end: func(e *endsEnv) {
				// The agent's other grant refreshes: the provider is asked and refuses.
				if r := e.refresh(e.trigger.Str("refresh_token")); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
					e.t.Fatalf("the re-check did not refuse: %d %s", r.Status, r.Raw)
				}
			}},
		{name: "password file removal", end: func(e *endsEnv) {
			e.publish(func(p *config.Project) {
				p.SignIn.Passwords = maps.Clone(p.SignIn.Passwords)
				delete(p.SignIn.Passwords, stack.AliceEmail)
			})
		}},
		{name: "issuer change", oidc: true, end: func(e *endsEnv) {
			e.publish(func(p *config.Project) {
				o := *p.SignIn.OIDC
				o.Issuer = "https://login.other.example"
				p.SignIn.OIDC = &o
			})
		}},
		// The administrator's `delete people/x` (webhook/admin) is the store's EndPersonAccess
		// and nothing else; the admin API is served by another server than the one under test
		// here, so the row calls the store as it does (webhook/admin/endaccess_test.go tests
		// the API's part).
		{name: "administrator", end: func(e *endsEnv) {
			if _, err := e.h.Store().EndPersonAccess(context.Background(), stack.ProjectKey, e.person.ID, e.h.Clock.Now()); err != nil {
				e.t.Fatal(err)
			}
		}},
	}
	// Each way in says whether it was refused, and what it got.
	type way struct {
		name string
		try  func(*endsEnv) (refused bool, got string)
	}
	ways := []way{
		{"browser session", func(e *endsEnv) (bool, string) {
			pg := e.b.Account()
			return pg.Status == http.StatusSeeOther && strings.Contains(pg.Location(), "/sign-in"), pg.Location()
		}},
		{"passkey sign-in", func(e *endsEnv) (bool, string) {
			st, out := e.passkeySignIn()
			return st == http.StatusBadRequest && out["error"] == "refused", out["error"].(string)
		}},
		{"code in flight", func(e *endsEnv) (bool, string) {
			r := e.agentToken(url.Values{"grant_type": {"authorization_code"}, "code": {e.code},
				"redirect_uri": {agentRedirect}, "code_verifier": {e.codePKCE.Verifier}})
			return r.Status == http.StatusBadRequest && r.Str("error") == "invalid_grant", string(r.Raw)
		}},
		{"access token at exchange", func(e *endsEnv) (bool, string) {
			r := e.exchange()
			return r.Status == http.StatusBadRequest && r.Str("error") == "invalid_grant" && r.Str("connect_uri") == "", string(r.Raw)
		}},
		{"access token at introspection", func(e *endsEnv) (bool, string) {
			r := e.agentPost("/introspect", url.Values{"token": {e.tokens.Str("access_token")}})
			return r.Status == http.StatusOK && r.Body["active"] == false, string(r.Raw)
		}},
		{"access token at userinfo", func(e *endsEnv) (bool, string) {
			req, _ := http.NewRequest(http.MethodGet, e.h.Issuer+"/userinfo", nil)
			req.Header.Set("Authorization", "Bearer "+e.tokens.Str("access_token"))
			r := e.send(req)
			return r.Status == http.StatusUnauthorized, string(r.Raw)
		}},
		{"access token at ID-JAG issuance", func(e *endsEnv) (bool, string) {
			r := e.idjag(e.tokens.Str("access_token"), idjag.TokenTypeAccessToken)
			return r.Status == http.StatusBadRequest && r.Str("error") == "invalid_grant", string(r.Raw)
		}},
		{"ID token at ID-JAG issuance", func(e *endsEnv) (bool, string) {
			r := e.idjag(e.tokens.Str("id_token"), idjag.TokenTypeIDToken)
			return r.Status == http.StatusBadRequest && r.Str("error") == "invalid_grant", string(r.Raw)
		}},
		{"refresh", func(e *endsEnv) (bool, string) {
			r := e.refresh(e.tokens.Str("refresh_token"))
			return r.Status == http.StatusBadRequest && r.Str("error") == "invalid_grant", string(r.Raw)
		}},
		{"connect link", func(e *endsEnv) (bool, string) {
			// Opened in the person's browser; whoever follows it must sign in (again) first,
			// which the person can no longer do; a link the end closed is not found.
			pg := e.b.MustFollow(e.b.MustGet(e.link))
			return pg.Status == http.StatusNotFound || strings.Contains(pg.URL, "/sign-in") || strings.Contains(pg.Body, `name="password"`),
				pg.URL + " " + pg.Text()
		}},
	}

	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			e := newEndsEnv(t, r.oidc)
			if r.prep != nil {
				r.prep(e)
			}
			e.openYoungWaysIn()
			// The end happens while the callback is under way: after its state was taken,
			// before the connection is saved.
			fired := false
			if r.end != nil {
				during := func() { fired = true; r.end(e) }
				e.duringCallback.Store(&during)
			}
			tryWays := func() {
				for _, w := range ways {
					t.Run(w.name, func(t *testing.T) {
						refused, got := w.try(e)
						if r.end == nil && refused {
							t.Fatalf("refused with nothing ended: %s", got)
						}
						if r.end != nil && !refused {
							t.Errorf("still works after the end: %s", got)
						}
					})
				}
			}
			if r.end == nil {
				// The connection the callback saves would close the connect link: with nothing
				// to end, the other ways are tried first.
				tryWays()
			}
			cb := e.b.MustGet(e.callback)
			if r.end != nil && !fired {
				t.Fatal("the end did not happen during the callback")
			}
			conns := e.h.Connections(e.email)
			t.Run("upstream callback in flight", func(t *testing.T) {
				refused := cb.Status == http.StatusForbidden && len(conns) == 0
				if r.end == nil {
					if refused || len(conns) != 1 {
						t.Fatalf("with nothing ended the callback was refused: %d %s (%d connections)", cb.Status, cb.Text(), len(conns))
					}
					return
				}
				if !refused {
					t.Errorf("a callback that finished after the end saved a connection: %d %s (%d connections)", cb.Status, cb.Text(), len(conns))
				}
			})
			if r.end != nil {
				tryWays()
			}
		})
	}
}

const (
	endsAgentSecret = "lk_cs_agent-secret-for-tests-only-0123456789abcdef"
	agentRedirect   = "https://agent.example/cb"
	toolsIssuer     = "https://tools.example"
)

// endsEnv is one installation with one person (alice) and the ways in she and her agent hold.
type endsEnv struct {
	t      *testing.T
	h      *stack.Stack
	idp    *stack.IDP
	b      *stack.Browser // alice's browser
	email  string
	person store.Person
	key    *softPasskey
	// The agent's tokens, and a second grant whose refresh triggers a re-check.
	tokens, trigger stack.Answer
	// Opened just before the end: a code not redeemed yet, a connect link, an upstream callback.
	code     string
	codePKCE stack.PKCE
	link     string
	callback string
	// duringCallback runs once, after the callback took its state.
	duringCallback atomic.Pointer[func()]
}

// hookStore runs the environment's duringCallback when an upstream callback has taken its
// state: the moment between the state and the saved connection, while the service is asked.
type hookStore struct {
	store.Store
	e *endsEnv
}

func (s hookStore) ConsumeCallbackState(ctx context.Context, stateHash []byte, now time.Time, check func(store.CallbackState) error) (store.CallbackState, error) {
	st, err := s.Store.ConsumeCallbackState(ctx, stateHash, now, check)
	if err == nil {
		if f := s.e.duringCallback.Swap(nil); f != nil {
			(*f)()
		}
	}
	return st, err
}

func newEndsEnv(t *testing.T, oidc bool) *endsEnv {
	t.Helper()
	e := &endsEnv{t: t}
	e.h = stack.New(t, stack.Options{Audit: true, PublicHost: "localhost", GitHubHost: "127.0.0.2", Store: func(s store.Store) store.Store { return hookStore{s, e} }})
	e.idp = stack.NewIDP(t, e.h.Clock.Now)
	signing, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e.publish(func(p *config.Project) {
		p.SigningKeys = []config.SigningKey{{ID: "k1", Algorithm: "ES256", Private: signing}}
		p.SignIn.OIDC = &config.OIDCProvider{Issuer: e.idp.URL, ClientID: "latchkey", ClientSecret: "idp-secret",
			Label: "Sign in with Corp SSO", RecheckInterval: 10 * time.Minute}
		p.Clients = maps.Clone(p.Clients)
		p.Clients["agent"] = &config.Client{
			ID: "agent", SecretHash: secret.Hash(endsAgentSecret), Name: "Agent", RedirectURIs: []string{agentRedirect},
			GrantTypes:              []string{"authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:token-exchange"},
			Scopes:                  []string{"openid", "email", "profile"},
			TokenEndpointAuthMethod: "client_secret_basic",
			Connectors:              []string{e.h.Connector.Key},
		}
		p.IdentityAssertions = config.IdentityAssertions{Audiences: map[string]*config.AssertionAudience{toolsIssuer: {
			Issuer: toolsIssuer, Clients: map[string]config.AssertionClient{"agent": {ResourceClientID: "agent-at-tools"}},
		}}}
	})

	e.b = e.h.Browser()
	if oidc {
		e.email = "alice@corp.example"
		e.idp.Lock()
		e.idp.Login = "alice-1"
		// Connecting a service needs a recent sign-in, which the provider's auth_time shows.
		e.idp.AuthTime = func() (time.Time, bool) { return e.h.Clock.Now(), true }
		e.idp.Unlock()
		pg := e.b.MustFollow(e.b.MustGet(e.h.Issuer + "/sign-in/oidc?return_to=" + url.QueryEscape("/team/demo/account")))
		if pg.Status != http.StatusOK || !strings.Contains(pg.Body, e.email) {
			t.Fatalf("OpenID sign-in: %d %s", pg.Status, pg.Text())
		}
	} else {
		e.email = stack.AliceEmail
		e.b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
	}
	e.person = e.h.Person(e.email)

	// A passkey, enrolled as the account page would store it.
	e.key = newSoftPasskey(t)
	if err := e.h.Store().AddPasskey(context.Background(), store.Passkey{
		Project: stack.ProjectKey, CredentialID: e.key.id, Subject: e.person.ID, Name: "Laptop", PublicKey: e.key.cose,
		AAGUID: make([]byte, 16), AttestationFormat: "none", UserVerified: true, CreatedAt: e.h.Clock.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	e.tokens = e.redeem(e.authorize())
	e.trigger = e.redeem(e.authorize())
	if e.tokens.Str("id_token") == "" {
		t.Fatalf("no ID token: %s", e.tokens.Raw)
	}
	return e
}

// openYoungWaysIn opens what the person or agent has under way when access ends.
func (e *endsEnv) openYoungWaysIn() {
	e.t.Helper()
	e.code, e.codePKCE = e.authorize()
	// Token exchange for GitHub, which alice has not connected: the refusal carries a link.
	x := e.exchange()
	if e.link = x.Str("connect_uri"); e.link == "" {
		e.t.Fatalf("no connect link: %d %s", x.Status, x.Raw)
	}
	res := e.b.PressOnAccount("Connect GitHub")
	if res.Status != http.StatusSeeOther {
		e.t.Fatalf("Connect answered %d: %s", res.Status, res.Text())
	}
	e.b.SignInGitHub(stack.AliceLogin)
	e.h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
	at := e.b.MustGet(res.Location())
	if at.Status != http.StatusFound || !strings.HasPrefix(at.Location(), e.h.CallbackURL+"?") {
		e.t.Fatalf("GitHub answered %d %q: %s", at.Status, at.Location(), at.Text())
	}
	e.callback = at.Location()
}

func (e *endsEnv) publish(fn func(*config.Project)) {
	p := *e.h.Project
	fn(&p)
	e.h.Project = &p
	e.h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{stack.ProjectKey: &p}, Version: e.h.Holder().Load().Version + 1})
}

// authorize runs the browser side of the agent's authorization and returns the code.
func (e *endsEnv) authorize() (string, stack.PKCE) {
	e.t.Helper()
	pk := stack.NewPKCE()
	q := url.Values{"response_type": {"code"}, "client_id": {"agent"}, "redirect_uri": {agentRedirect}, "state": {"s"},
		"scope": {"openid email"}, "code_challenge": {pk.Challenge}, "code_challenge_method": {"S256"}}
	pg := e.b.MustGet(e.h.Issuer + "/authorize?" + q.Encode())
	for range 10 {
		switch {
		case pg.Status == http.StatusFound || pg.Status == http.StatusSeeOther:
			loc := pg.Location()
			if strings.HasPrefix(loc, agentRedirect) {
				u, _ := url.Parse(loc)
				if c := u.Query().Get("code"); c != "" {
					return c, pk
				}
				e.t.Fatalf("authorization refused: %s", loc)
			}
			pg = e.b.MustGet(loc)
		case pg.Status == http.StatusOK && pg.Continue() != "":
			pg = e.b.MustGet(pg.Continue())
		case pg.Status == http.StatusOK && strings.Contains(pg.Text(), "Where access goes"):
			f, _ := pg.FindForm("Allow")
			if pg.HasField("I set up this connection") {
				if err := f.Check("I set up this connection"); err != nil {
					e.t.Fatal(err)
				}
			}
			pg = e.b.MustPost(f.Action, f.Fields)
		default:
			e.t.Fatalf("unexpected page %d at %s: %s", pg.Status, pg.URL, pg.Text())
		}
	}
	e.t.Fatal("authorization did not finish")
	return "", pk
}

func (e *endsEnv) redeem(code string, pk stack.PKCE) stack.Answer {
	e.t.Helper()
	r := e.agentToken(url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {agentRedirect},
		"code_verifier": {pk.Verifier}})
	if r.Status != http.StatusOK {
		e.t.Fatalf("code redemption: %d %s", r.Status, r.Raw)
	}
	return r
}

func (e *endsEnv) send(req *http.Request) stack.Answer {
	e.t.Helper()
	return stack.MustDo(e.t, req)
}

func (e *endsEnv) post(path string, form url.Values, user, pass string) stack.Answer {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.h.Issuer+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	}
	return e.send(req)
}

func (e *endsEnv) agentPost(path string, form url.Values) stack.Answer {
	e.t.Helper()
	return e.post(path, form, "agent", endsAgentSecret)
}

func (e *endsEnv) agentToken(form url.Values) stack.Answer {
	e.t.Helper()
	return e.agentPost("/token", form)
}

func (e *endsEnv) refresh(rt string) stack.Answer {
	e.t.Helper()
	return e.agentToken(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

func (e *endsEnv) postLogout(token string) stack.Answer {
	e.t.Helper()
	return e.post("/sign-in/backchannel-logout", url.Values{"logout_token": {token}}, "", "")
}

func (e *endsEnv) exchange() stack.Answer {
	e.t.Helper()
	return e.agentToken(url.Values{"grant_type": {exchange.GrantType}, "subject_token": {e.tokens.Str("access_token")},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"}, "audience": {e.h.Connector.Audience}})
}

func (e *endsEnv) idjag(subject, typ string) stack.Answer {
	e.t.Helper()
	return e.agentToken(url.Values{"grant_type": {exchange.GrantType}, "requested_token_type": {idjag.TokenTypeIDJAG},
		"subject_token": {subject}, "subject_token_type": {typ}, "audience": {toolsIssuer}})
}

// passkeySignIn signs a new browser in with alice's passkey, as the sign-in page's script does.
func (e *endsEnv) passkeySignIn() (int, map[string]any) {
	e.t.Helper()
	b := e.h.Browser()
	b.MustGet(e.h.Issuer + "/sign-in")
	st, opts := e.passkeyPost(b, "/sign-in/passkey/options", "{}")
	if st != http.StatusOK {
		e.t.Fatalf("passkey options: %d %v", st, opts)
	}
	pk := opts["publicKey"].(map[string]any)
	rpID, _ := pk["rpId"].(string)
	answer := e.key.assert(e.t, e.h.Front.URL, rpID, pk["challenge"].(string), []byte(e.person.ID))
	return e.passkeyPost(b, "/sign-in/passkey", answer)
}

func (e *endsEnv) passkeyPost(b *stack.Browser, path, body string) (int, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.h.Issuer+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := b.C.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{"error": ""}
	if err := json.Unmarshal(raw, &out); err != nil {
		e.t.Fatalf("%s: not JSON (%d): %s", path, resp.StatusCode, raw)
	}
	if _, ok := out["error"].(string); !ok {
		out["error"] = ""
	}
	return resp.StatusCode, out
}

// softPasskey is a software authenticator holding one P-256 passkey (the shape
// webhook/signin/passkey_test.go enrols).
type softPasskey struct {
	key   *ecdsa.PrivateKey
	id    []byte
	cose  []byte
	count uint32
}

func newSoftPasskey(t *testing.T) *softPasskey {
	k := stack.NewPasskeyKey(t)
	return &softPasskey{key: k.Key, id: k.ID, cose: k.COSE}
}

// assert answers a sign-in ceremony: user present and verified, the counter one up.
func (k *softPasskey) assert(t *testing.T, origin, rpID, challenge string, userHandle []byte) string {
	t.Helper()
	k.count++
	clientData, _ := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": challenge, "origin": origin, "crossOrigin": false})
	rpHash := sha256.Sum256([]byte(rpID))
	authData := binary.BigEndian.AppendUint32(append(rpHash[:], 0x05), k.count) // flags UP|UV
	cd := sha256.Sum256(clientData)
	digest := sha256.Sum256(append(append([]byte{}, authData...), cd[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, k.key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	answer, _ := json.Marshal(map[string]any{
		"id": b64(k.id), "rawId": b64(k.id), "type": "public-key", "authenticatorAttachment": "platform",
		"clientExtensionResults": map[string]any{},
		"response": map[string]any{"clientDataJSON": b64(clientData), "authenticatorData": b64(authData),
			"signature": b64(sig), "userHandle": b64(userHandle)},
	})
	return string(answer)
}

// TestPasskeySignInAsksTheProvider: a passkey is Latchkey's own credential, so for a person of
// the project's OpenID provider a passkey sign-in needs the provider's word on them no older than
// recheckInterval, as an agent's refresh does, but with no grace for a provider that does not
// answer. The refusal reads as an unknown passkey's and is recorded.
func TestPasskeySignInAsksTheProvider(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		idp     func(*stack.IDP)
		refused string // the sign-in.failed reason; "" when the sign-in goes through
	}{
		{"the provider confirms the person", func(*stack.IDP) {}, ""},
		{"the provider let the person go", func(f *stack.IDP) { f.Disable("alice-1") }, "recheck_failed"},
		{"the provider does not answer", func(f *stack.IDP) { f.Lock(); f.Down = true; f.Unlock() }, "recheck_unavailable"},
		// allowedGroups (decision 0063): the provider still honours alice's grant, but its
		// refreshed ID token says she left the only allowed group.
		{"the person left the allowed group", func(f *stack.IDP) {
			f.Lock()
			f.RefreshIDToken = true
			f.Users["alice-1"].Claims = map[string]any{"groups": []string{"contractors"}}
			f.Unlock()
		}, "recheck_failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEndsEnv(t, true)
			c.idp(e.idp)
			e.publish(func(p *config.Project) {
				o := *p.SignIn.OIDC
				o.AllowedGroups, o.GroupsClaim = []string{"staff"}, "groups"
				p.SignIn.OIDC = &o
			})
			e.idp.Lock()
			if e.idp.Users["alice-1"].Claims == nil {
				e.idp.RefreshIDToken = true
				e.idp.Users["alice-1"].Claims = map[string]any{"groups": []string{"staff"}}
			}
			e.idp.Unlock()
			// Inside the interval the provider is not asked: the sign-in itself was its word.
			if st, out := e.passkeySignIn(); st != http.StatusOK {
				t.Fatalf("passkey sign-in inside the interval: %d %v", st, out)
			}
			e.h.Clock.Advance(11 * time.Minute)
			st, out := e.passkeySignIn()
			if c.refused == "" {
				if st != http.StatusOK {
					t.Fatalf("passkey sign-in of a confirmed person: %d %v", st, out)
				}
				return
			}
			if st != http.StatusBadRequest || out["error"] != "refused" || !strings.Contains(fmt.Sprint(out["message"]), "not one of this project") {
				t.Fatalf("passkey sign-in: %d %v", st, out)
			}
			var rec *store.AuditRecord
			for _, r := range e.h.Audit() {
				if r.Action == "signin.failed" && r.Details["method"] == "passkey" {
					rec = &r
				}
			}
			if rec == nil || rec.Reason != c.refused || rec.Target != e.person.ID {
				t.Errorf("audit: %+v", rec)
			}
			if c.refused == "recheck_failed" {
				// The refusal ended the person's access, the passkey with it.
				if _, err := e.h.Store().GetPasskey(context.Background(), stack.ProjectKey, e.key.id); err == nil {
					t.Error("the passkey of a person the provider let go is still there")
				}
			}
		})
	}
}
