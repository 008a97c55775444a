//go:build !latchkey_local

package controllers

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook"
	"latchkey.dev/latchkey/webhook/exchange"
)

const refusal = "This organisation only allows recognised apps to connect"

// web drives the real HTTP server in process, against the snapshot the compiler publishes and
// the store the controllers revoke in.
type web struct {
	t    *testing.T
	srv  http.Handler
	base string // issuer
}

func (w *web) call(method, path string, form url.Values, user, pass, bearer string) (int, map[string]any) {
	w.t.Helper()
	req := httptest.NewRequest(method, w.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	rec := httptest.NewRecorder()
	w.srv.ServeHTTP(rec, req)
	var out map[string]any
	json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// docs/recognised-apps.md: switching "Only recognised apps can connect" on ends, at once, every live token of
// every client it now refuses — declared OAuthClients and dynamically registered clients, with
// one honest and one foreign redirect or with only a foreign one — while the clients it allows
// keep working; the save says how many were ended, and relaxing the policy brings none back.
func TestOnlyRecognisedAppsRevokesOnEnable(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	waitReady(t, newProject(t, ns, "p", nil))
	key := ns + "/p"
	ref := v1alpha1.ProjectReference{Name: "p"}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh", Labels: forConnector()}, StringData: map[string]string{"clientSecret": "gh-secret-for-tests"}})
	gh := newConnector(ns, "github", "p", "gh")
	create(t, gh)
	waitReady(t, gh)

	// One policy recognises the organisation's own portal and restricts nothing.
	portalPolicy := &v1alpha1.RedirectPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "portal"},
		Spec: v1alpha1.RedirectPolicySpec{ProjectRef: ref, Recognised: []v1alpha1.RecognisedRedirect{
			{Name: "Acme portal", URI: "https://portal.acme.example/cb"},
		}},
	}
	create(t, portalPolicy)
	waitReady(t, portalPolicy)

	agent := func(name string, uris ...v1alpha1.RedirectURI) *v1alpha1.OAuthClient {
		oc := newClient(ns, name, ref)
		oc.Spec.RedirectURIs = uris
		// Confidential: token exchange always authenticates the client (RFC 8693 §5).
		oc.Spec.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantAuthorizationCode, v1alpha1.GrantRefreshToken, v1alpha1.GrantTokenExchange}
		oc.Spec.Connectors = []v1alpha1.ConnectorName{"github"}
		create(t, oc)
		return oc
	}
	honest := agent("honest", "http://127.0.0.1:8070/callback", "https://claude.ai/api/mcp/auth_callback", "com.example.agent:/cb")
	portal := agent("portal", "https://portal.acme.example/cb")
	// A registered "Claude" with one honest callback and the attacker's.
	phish := agent("phish", "https://claude.ai/api/mcp/auth_callback", "https://claude-ai.evil.example/api/mcp/auth_callback")
	rs := newClient(ns, "rs", ref)
	rs.Spec.RedirectURIs = nil
	rs.Spec.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantClientCredentials}
	create(t, rs)
	for _, oc := range []*v1alpha1.OAuthClient{honest, portal, phish, rs} {
		waitReady(t, oc)
	}
	waitCondition(t, phish, v1alpha1.OAuthClientRefusedByPolicyCondition, metav1.ConditionFalse, v1alpha1.OAuthClientPolicyNotEnforcedReason)
	if got := phish.Status.Redirects; len(got) != 2 || got[0].Classification != v1alpha1.RedirectClaude || got[1].Classification != v1alpha1.RedirectOther {
		t.Errorf("phish status.redirects = %+v", got)
	}
	waitCondition(t, portal, v1alpha1.OAuthClientRefusedByPolicyCondition, metav1.ConditionFalse, v1alpha1.OAuthClientPolicyNotEnforcedReason)
	if got := portal.Status.Redirects; len(got) != 1 || got[0].Classification != v1alpha1.RedirectNamed || got[0].Name != "Acme portal" {
		t.Errorf("portal status.redirects = %+v", got)
	}
	if got := honest.Status.Redirects; len(got) != 3 || got[0].Classification != v1alpha1.RedirectLoopback ||
		got[1].Classification != v1alpha1.RedirectClaude || got[2].Classification != v1alpha1.RedirectAppScheme {
		t.Errorf("honest status.redirects = %+v", got)
	}
	waitSnapshot(t, "clients and connector compiled", func(s *config.Snapshot) error {
		p := s.Project(key)
		if p == nil || len(p.Clients) != 4 || len(p.ConnectorsByAudience) != 1 || len(p.Redirects.Named) != 1 {
			return fmt.Errorf("not yet: %+v", p)
		}
		for _, oc := range []*v1alpha1.OAuthClient{honest, portal, phish} {
			if c := p.Clients[oc.Status.ClientID]; c == nil || len(c.Connectors) != 1 {
				return fmt.Errorf("%s not compiled with its connector", oc.Name)
			}
		}
		return nil
	})
	var audience string
	for a := range holder.Load().Project(key).ConnectorsByAudience {
		audience = a
	}
	var rsCreds corev1.Secret
	rsCreds.Namespace, rsCreds.Name = ns, rs.Status.SecretName
	if err := get(&rsCreds); err != nil {
		t.Fatal(err)
	}
	rsID, rsSecret := rs.Status.ClientID, string(rsCreds.Data[v1alpha1.ClientSecretSecretKey])
	secrets := map[string]string{}
	for _, oc := range []*v1alpha1.OAuthClient{honest, portal, phish} {
		var creds corev1.Secret
		creds.Namespace, creds.Name = ns, oc.Status.SecretName
		if err := get(&creds); err != nil {
			t.Fatal(err)
		}
		secrets[oc.Status.ClientID] = string(creds.Data[v1alpha1.ClientSecretSecretKey])
	}

	// Two dynamically registered clients: one on this device, one on someone's website.
	for id, uri := range map[string]string{"dcr-ok": "http://127.0.0.1:9000/cb", "dcr-bad": "https://evil.example/cb"} {
		if err := testStore.CreateClient(ctx, store.Client{
			Project: key, ID: id, RedirectURIs: []string{uri}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
			CreatedAt: testNow, UpdatedAt: testNow,
		}); err != nil {
			t.Fatal(err)
		}
	}

	alice, err := testStore.UpsertPerson(ctx, store.Person{Project: key, ID: "alice-" + randomSuffix(), Source: "password",
		SourceSubject: "alice@example.com", Email: "alice@example.com", Name: "Alice", CreatedAt: testNow})
	if err != nil {
		t.Fatal(err)
	}

	// Live tokens: one access + refresh pair per authorization.
	type pair struct{ client, at, rt string }
	mint := func(clientID string) pair {
		p := pair{clientID, secret.New(secret.PrefixAccessToken), secret.New(secret.PrefixRefreshToken)}
		base := store.Token{Project: key, ClientID: clientID, Subject: alice.ID, Scopes: []string{"read"},
			FamilyID: "fam-" + randomSuffix(), AuthTime: testNow, IssuedAt: testNow}
		a, r := base, base
		a.Hash, a.Kind, a.ExpiresAt = secret.Hash(p.at), store.AccessToken, testNow.Add(time.Hour)
		r.Hash, r.Kind, r.ExpiresAt = secret.Hash(p.rt), store.RefreshToken, testNow.Add(24*time.Hour)
		if err := testStore.CreateTokens(ctx, a, r); err != nil {
			t.Fatal(err)
		}
		return p
	}
	allowed := []pair{mint(honest.Status.ClientID), mint(portal.Status.ClientID), mint("dcr-ok")}
	refused := []pair{mint(phish.Status.ClientID), mint(phish.Status.ClientID), mint("dcr-bad")}
	wantRevoked := int64(2 * len(refused))

	srv, err := webhook.New(webhook.Options{
		Config: holder, Store: testStore, Keyring: secret.NewRandomKeyring(),
		Now: func() time.Time { return testNow }, PublicURL: testPublicURL,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Grant(exchange.GrantType, exchange.New(srv.Env(), testStore, nil))
	w := &web{t: t, srv: srv, base: testPublicURL + "/" + key}
	active := func(tok string) bool {
		t.Helper()
		status, out := w.call(http.MethodPost, "/introspect", url.Values{"token": {tok}}, rsID, rsSecret, "")
		if status != http.StatusOK {
			t.Fatalf("introspection: %d %v", status, out)
		}
		return out["active"] == true
	}
	// tokenAs calls the token endpoint as client: with its secret when it has one, else as a
	// public client.
	tokenAs := func(client string, form url.Values) (int, map[string]any) {
		t.Helper()
		if sec, ok := secrets[client]; ok {
			return w.call(http.MethodPost, "/token", form, client, sec, "")
		}
		form.Set("client_id", client)
		return w.call(http.MethodPost, "/token", form, "", "", "")
	}
	exchangeAs := func(p pair) (int, map[string]any) {
		return tokenAs(p.client, url.Values{
			"grant_type":    {exchange.GrantType},
			"subject_token": {p.at}, "subject_token_type": {exchange.TokenTypeAccessToken}, "audience": {audience},
		})
	}
	for _, p := range slices.Concat(allowed, refused) {
		if !active(p.at) {
			t.Fatalf("%s: token not active before the policy", p.client)
		}
	}

	// Switch it on, in a second policy: the rules are the union, enforcement on if any says so.
	strict := &v1alpha1.RedirectPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "strict"},
		Spec:       v1alpha1.RedirectPolicySpec{ProjectRef: ref, OnlyRecognisedApps: true},
	}
	create(t, strict)
	waitSnapshot(t, "onlyRecognisedApps on", func(s *config.Snapshot) error {
		if p := s.Project(key); p == nil || !p.Redirects.OnlyRecognisedApps || len(p.Redirects.Named) != 1 {
			return fmt.Errorf("not yet")
		}
		return nil
	})

	// At once, whether or not the controller has revoked anything yet: introspection, userinfo
	// and token exchange refuse the refused clients' tokens, and serve the others.
	for _, p := range refused {
		if active(p.at) {
			t.Errorf("%s: access token still active", p.client)
		}
		if status, out := w.call(http.MethodGet, "/userinfo", nil, "", "", p.at); status != http.StatusUnauthorized {
			t.Errorf("%s: userinfo %d %v", p.client, status, out)
		}
	}
	if status, out := exchangeAs(refused[0]); status != http.StatusBadRequest || out["error"] != "invalid_grant" || out["error_description"] != refusal {
		t.Errorf("exchange by a refused client: %d %v", status, out)
	}
	for _, p := range allowed {
		if !active(p.at) {
			t.Errorf("%s: an allowed client's token stopped working", p.client)
		}
		if status, out := w.call(http.MethodGet, "/userinfo", nil, "", "", p.at); status != http.StatusOK || out["sub"] != alice.ID {
			t.Errorf("%s: userinfo %d %v", p.client, status, out)
		}
	}
	if status, out := exchangeAs(allowed[0]); status != http.StatusBadRequest || out["reason"] != exchange.ReasonConnectRequired {
		t.Errorf("exchange by an allowed client must reach the connect link: %d %v", status, out)
	}

	// The controller ended every live token of the refused clients, and says so.
	eventually(t, "status.revokedTokens", func() error {
		if err := get(strict); err != nil {
			return err
		}
		if strict.Status.RevokedTokens != wantRevoked {
			return fmt.Errorf("revokedTokens = %d, want %d", strict.Status.RevokedTokens, wantRevoked)
		}
		return nil
	})
	if want := []string{"dcr-bad", phish.Status.ClientID}; !slices.Equal(strict.Status.RefusedClients, sorted(want)) {
		t.Errorf("refusedClients = %v, want %v", strict.Status.RefusedClients, sorted(want))
	}
	ev := waitEvent(t, strict, corev1.EventTypeNormal, v1alpha1.RedirectPolicyTokensRevokedReason)
	if ev.Note != fmt.Sprintf("revoked %d tokens held by 2 clients", wantRevoked) {
		t.Errorf("event: %q", ev.Note)
	}
	for _, p := range refused {
		for _, raw := range []string{p.at, p.rt} {
			tok, err := testStore.GetToken(ctx, secret.Hash(raw))
			if err != nil || tok.RevokedAt == nil {
				t.Errorf("%s: token not revoked in the store: %v %+v", p.client, err, tok)
			}
		}
	}
	live, err := testStore.CountLiveTokens(ctx, key, testNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range refused {
		if live[p.client] != 0 {
			t.Errorf("%s still holds %d live tokens", p.client, live[p.client])
		}
	}
	for _, p := range allowed {
		if live[p.client] != 2 {
			t.Errorf("%s holds %d live tokens, want 2", p.client, live[p.client])
		}
	}
	if err := get(portalPolicy); err != nil || portalPolicy.Status.RevokedTokens != 0 || len(portalPolicy.Status.RefusedClients) != 0 {
		t.Errorf("a policy that does not restrict revokes nothing: %+v %v", portalPolicy.Status, err)
	}

	// A refused client cannot renew; an allowed one can.
	if status, out := tokenAs(refused[0].client, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refused[0].rt}}); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
		t.Errorf("refresh by a refused client: %d %v", status, out)
	}
	if status, out := tokenAs(allowed[0].client, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {allowed[0].rt}}); status != http.StatusOK {
		t.Errorf("refresh by an allowed client: %d %v", status, out)
	}

	// kubectl get oauthclients says what is blocked and why.
	c := waitCondition(t, phish, v1alpha1.OAuthClientRefusedByPolicyCondition, metav1.ConditionTrue, v1alpha1.OAuthClientUnrecognisedRedirectReason)
	if !strings.Contains(c.Message, "https://claude-ai.evil.example/api/mcp/auth_callback") || strings.Contains(c.Message, "https://claude.ai/") {
		t.Errorf("condition message names the wrong redirects: %q", c.Message)
	}
	waitEvent(t, phish, corev1.EventTypeWarning, v1alpha1.OAuthClientUnrecognisedRedirectReason)
	waitCondition(t, honest, v1alpha1.OAuthClientRefusedByPolicyCondition, metav1.ConditionFalse, v1alpha1.OAuthClientAllRecognisedReason)
	waitCondition(t, portal, v1alpha1.OAuthClientRefusedByPolicyCondition, metav1.ConditionFalse, v1alpha1.OAuthClientAllRecognisedReason)

	// Removing the policy brings nothing back.
	if err := k8s.Delete(ctx, strict); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, "onlyRecognisedApps off", func(s *config.Snapshot) error {
		if p := s.Project(key); p == nil || p.Redirects.OnlyRecognisedApps {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	for _, p := range refused {
		if active(p.at) {
			t.Errorf("%s: a revoked token came back when the policy went", p.client)
		}
		if status, out := tokenAs(p.client, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {p.rt}}); status != http.StatusBadRequest {
			t.Errorf("%s: a revoked refresh token works again: %d %v", p.client, status, out)
		}
	}
	waitCondition(t, phish, v1alpha1.OAuthClientRefusedByPolicyCondition, metav1.ConditionFalse, v1alpha1.OAuthClientPolicyNotEnforcedReason)
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestClassify(t *testing.T) {
	rules := config.DefaultRedirectRules()
	rules.Named = []config.NamedRedirect{{Name: "Acme portal", Pattern: "https://portal.acme.example/t/{tenant}/cb"}}
	for uri, want := range map[string]v1alpha1.RedirectStatus{
		"https://claude.ai/api/mcp/auth_callback":               {Classification: v1alpha1.RedirectClaude},
		"https://claude.com/api/mcp/auth_callback":              {Classification: v1alpha1.RedirectClaude},
		"https://chatgpt.com/connector/oauth/abc123":            {Classification: v1alpha1.RedirectChatGPT},
		"https://chatgpt.com/connector_platform_oauth_redirect": {Classification: v1alpha1.RedirectChatGPT},
		"https://portal.acme.example/t/blue/cb":                 {Classification: v1alpha1.RedirectNamed, Name: "Acme portal"},
		"http://127.0.0.1:5000/cb":                              {Classification: v1alpha1.RedirectLoopback},
		"http://localhost/cb":                                   {Classification: v1alpha1.RedirectLoopback},
		"com.example.app:/cb":                                   {Classification: v1alpha1.RedirectAppScheme},
		"https://claude.ai@evil.example/":                       {Classification: v1alpha1.RedirectOther},
		"https://claude.ai.evil.example/api/mcp/auth_callback":  {Classification: v1alpha1.RedirectOther},
		"https://localhost.evil.example/cb":                     {Classification: v1alpha1.RedirectOther},
	} {
		want.URI = uri
		if got := classify(uri, rules); got != want {
			t.Errorf("classify(%q) = %+v, want %+v", uri, got, want)
		}
	}
	off := rules
	off.Claude, off.Loopback = false, false
	if got := classify("https://claude.ai/api/mcp/auth_callback", off); got.Classification != v1alpha1.RedirectOther {
		t.Errorf("Claude switched off: %+v", got)
	}
	if got := classify("http://127.0.0.1/cb", off); got.Classification != v1alpha1.RedirectOther {
		t.Errorf("loopback switched off: %+v", got)
	}
	if plural(1, "token") != "1 token" || plural(12, "token") != "12 tokens" {
		t.Error("plural")
	}
}

// cachedLister lists through the manager's cache (with its field indexes), as the reconcilers'
// own client does.
type cachedLister struct {
	client.Client
	r client.Reader
}

func (c cachedLister) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	return c.r.List(ctx, l, opts...)
}

// Clients that identify themselves by a metadata document are found through the tokens they
// hold, and judged by the redirects their documents list; one whose document cannot be read
// now is left to the server, which refuses it while that lasts.
func TestRefusedDocumentClients(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	var docs sync.Map
	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := docs.Load(r.URL.Path)
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b.([]byte))
	}))
	defer site.Close()
	serve := func(path string, redirects ...string) string {
		id := site.URL + path
		b, _ := json.Marshal(map[string]any{"client_id": id, "redirect_uris": redirects})
		docs.Store(path, b)
		return id
	}
	good := serve("/good.json", "http://127.0.0.1/cb", "https://claude.ai/api/mcp/auth_callback")
	bad := serve("/bad.json", "http://127.0.0.1/cb", "https://evil.example/cb")
	gone := site.URL + "/gone.json"
	key := newNamespace(t, nil) + "/p"
	for _, id := range []string{good, bad, gone} {
		if err := testStore.CreateTokens(ctx, store.Token{Hash: secret.Hash(secret.New(secret.PrefixAccessToken)), Kind: store.AccessToken,
			Project: key, ClientID: id, Subject: "alice", FamilyID: "f-" + randomSuffix(), IssuedAt: testNow, ExpiresAt: testNow.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(site.Certificate())
	r := &policyPhases{
		base:      base{reader: clusterReader{cachedLister{Client: k8s, r: compiler.cache}}, clock: func() time.Time { return testNow }},
		store:     testStore,
		documents: clientdoc.New(clientdoc.Options{AllowLoopback: true, RootCAs: pool, Now: func() time.Time { return testNow }}),
	}
	rules := config.DefaultRedirectRules()
	rules.OnlyRecognisedApps = true
	got, err := r.refusedClients(ctx, key, rules)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{bad}) {
		t.Errorf("refused = %v, want [%s]", got, bad)
	}
}
