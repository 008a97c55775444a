package attacks

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/secret"
	latchkey "latchkey.dev/latchkey/mcp"
	"latchkey.dev/latchkey/mcp/dpop"
	"latchkey.dev/latchkey/test/stack"
)

func newKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// proof makes a DPoP proof on the installation's clock.
func (e *env) proof(key crypto.Signer, method, u string, c dpop.Claims) string {
	e.t.Helper()
	c.Method, c.URL = method, u
	if c.IssuedAt.IsZero() {
		c.IssuedAt = e.Clock.Now()
	}
	p, err := dpop.Sign(key, c)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// forgeProof changes the header of a proof by key and signs it again with key (alg none: not at
// all), so that the edit is the proof's only defect.
func forgeProof(t *testing.T, key crypto.Signer, proof string, edit func(h map[string]any)) string {
	t.Helper()
	parts := strings.Split(proof, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	edit(h)
	raw, _ = json.Marshal(h)
	input := base64.RawURLEncoding.EncodeToString(raw) + "." + parts[1]
	if h["alg"] == "none" {
		return input + "."
	}
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key.(*ecdsa.PrivateKey), sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// tokenWithProof posts form to the token endpoint with a DPoP header (none when proof is "").
func (e *env) tokenWithProof(clientID, clientSecret string, form url.Values, proof string) stack.Answer {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.Issuer+"/token", strings.NewReader(""))
	if clientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(clientSecret))
	} else {
		form.Set("client_id", clientID)
	}
	req.Body = http.NoBody
	req, _ = http.NewRequest(http.MethodPost, e.Issuer+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if clientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(clientSecret))
	}
	if proof != "" {
		req.Header.Set("DPoP", proof)
	}
	return e.send(req)
}

// dpopCodeFlow runs the code flow for a public client and redeems the code with a proof by key.
func (e *env) dpopCodeFlow(b *stack.Browser, clientID string, key crypto.Signer, extra url.Values) stack.Answer {
	e.t.Helper()
	pk := newPKCE()
	p, _ := e.authorizeAs(b, e.authorizeURL(clientID, loopback, pk, extra))
	code := codeFrom(p)
	if code == "" {
		e.t.Fatalf("no code: %d %s %s", p.Status, p.Location(), p.Text())
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {loopback}, "code_verifier": {pk.verifier}}
	for k, v := range extra {
		if k == "resource" {
			form[k] = v
		}
	}
	a := e.tokenWithProof(clientID, "", form, e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{}))
	if a.Status != http.StatusOK {
		e.t.Fatalf("redeeming with a proof: %d %s", a.Status, a.Raw)
	}
	return a
}

// TestDPoPAtTheTokenEndpoint: what a DPoP-bound grant gives a thief who copies its tokens but not
// its key — nothing — and the proofs the token endpoint refuses: replayed, for another URL or
// method, or missing where the Project or client requires one.
func TestDPoPAtTheTokenEndpoint(t *testing.T) {
	e := newEnv(t)
	c := e.registerPublic("Claude Desktop", loopback)
	alice := e.signedIn(stack.AliceEmail)
	key, thief := newKey(t), newKey(t)
	jkt, _ := dpop.Thumbprint(key)

	a := e.dpopCodeFlow(alice, c.ID, key, nil)
	if a.Str("token_type") != "DPoP" {
		t.Fatalf("token_type = %q, want DPoP: %s", a.Str("token_type"), a.Raw)
	}
	in := e.postBasic("/introspect", stack.MCP, stack.MCPSecret, url.Values{"token": {a.Str("access_token")}})
	if cnf, _ := in.Body["cnf"].(map[string]any); cnf["jkt"] != jkt || in.Body["token_type"] != "DPoP" {
		t.Fatalf("introspection of a bound token: %s, want cnf.jkt %s", in.Raw, jkt)
	}

	rt := a.Str("refresh_token")
	refresh := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}}
	t.Run("stolen refresh token without the key", func(t *testing.T) {
		if r := e.tokenWithProof(c.ID, "", refresh, ""); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
			t.Fatalf("refresh without a proof: %d %s", r.Status, r.Raw)
		}
		if r := e.tokenWithProof(c.ID, "", refresh, e.proof(thief, "POST", e.Issuer+"/token", dpop.Claims{})); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_grant" {
			t.Fatalf("refresh with the thief's key: %d %s", r.Status, r.Raw)
		}
		// Both attempts are in the audit log, for whoever watches for copied tokens.
		recs, err := e.Store().ListAudit(t.Context(), stack.ProjectKey, 100)
		if err != nil {
			t.Fatal(err)
		}
		var proofs []string
		for _, r := range recs {
			if r.Action == "refresh.refused" && r.Reason == "dpop_key_mismatch" && r.ClientID == c.ID {
				proofs = append(proofs, r.Details["proof"])
			}
		}
		if strings.Join(proofs, ",") != "another_key,none" {
			t.Errorf("refresh.refused dpop_key_mismatch records: %q, want the thief's key and no proof", proofs)
		}
	})
	t.Run("proofs refused", func(t *testing.T) {
		for name, proof := range map[string]string{
			"wrong htu":  e.proof(key, "POST", e.Issuer+"/introspect", dpop.Claims{}),
			"other host": e.proof(key, "POST", strings.Replace(e.Issuer, "127.0.0.1", "localhost", 1)+"/token", dpop.Claims{}),
			"wrong htm":  e.proof(key, "GET", e.Issuer+"/token", dpop.Claims{}),
			"stale iat":  e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{IssuedAt: e.Clock.Now().Add(-10 * time.Minute)}),
			"not a JWT":  "not-a-proof",
			"alg none":   forgeProof(t, key, e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{}), func(h map[string]any) { h["alg"] = "none" }),
			// A proof carrying its private key binds tokens to a key anyone who saw it holds.
			"embedded private key": forgeProof(t, key, e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{}), func(h map[string]any) {
				d, _ := key.(*ecdsa.PrivateKey).Bytes()
				h["jwk"].(map[string]any)["d"] = base64.RawURLEncoding.EncodeToString(d)
			}),
		} {
			if r := e.tokenWithProof(c.ID, "", refresh, proof); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_dpop_proof" {
				t.Errorf("%s: %d %s, want invalid_dpop_proof", name, r.Status, r.Raw)
			}
		}
	})
	// The holder refreshes with the key and stays bound; the very same proof a second time
	// (a replay by whoever saw it) is refused, whichever token it comes with.
	proof := e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{})
	r := e.tokenWithProof(c.ID, "", refresh, proof)
	if r.Status != http.StatusOK || r.Str("token_type") != "DPoP" {
		t.Fatalf("the holder's refresh: %d %s", r.Status, r.Raw)
	}
	again := e.tokenWithProof(c.ID, "", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.Str("refresh_token")}}, proof)
	if again.Status != http.StatusBadRequest || again.Str("error") != "invalid_dpop_proof" {
		t.Fatalf("replayed proof: %d %s", again.Status, again.Raw)
	}
	// Every refused proof is in the audit log; the replay stands out by its reason.
	recs, err := e.Store().ListAudit(t.Context(), stack.ProjectKey, 100)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, rec := range recs {
		if rec.Action == events.DPoPProofRefused && rec.ClientID == c.ID {
			reasons[rec.Reason]++
		}
	}
	if reasons["malformed"] != 7 || reasons["replayed"] != 1 {
		t.Errorf("dpop.proof_refused records by reason: %v, want 7 malformed (the refused proofs) and 1 replayed", reasons)
	}

	t.Run("stolen access token at userinfo", func(t *testing.T) {
		at := r.Str("access_token")
		get := func(scheme, proof string) (int, string) {
			req, _ := http.NewRequest(http.MethodGet, e.Issuer+"/userinfo", nil)
			req.Header.Set("Authorization", scheme+" "+at)
			if proof != "" {
				req.Header.Set("DPoP", proof)
			}
			ans := e.send(req)
			return ans.Status, ans.Header.Get("WWW-Authenticate")
		}
		if s, ch := get("Bearer", ""); s != http.StatusUnauthorized || !strings.HasPrefix(ch, "DPoP ") {
			t.Errorf("bound token as Bearer: %d %q", s, ch)
		}
		if s, _ := get("DPoP", ""); s != http.StatusUnauthorized {
			t.Errorf("bound token without a proof: %d", s)
		}
		if s, _ := get("DPoP", e.proof(thief, "GET", e.Issuer+"/userinfo", dpop.Claims{AccessToken: at})); s != http.StatusUnauthorized {
			t.Errorf("proof by another key than cnf.jkt: %d", s)
		}
		if s, _ := get("DPoP", e.proof(key, "GET", e.Issuer+"/userinfo", dpop.Claims{AccessToken: "another-token"})); s != http.StatusUnauthorized {
			t.Errorf("proof by the bound key made for another access token (ath): %d", s)
		}
		if s, _ := get("DPoP", e.proof(key, "GET", e.Issuer+"/introspect", dpop.Claims{AccessToken: at})); s != http.StatusUnauthorized {
			t.Errorf("proof by the bound key made for another endpoint (htu): %d", s)
		}
		good := e.proof(key, "GET", e.Issuer+"/userinfo", dpop.Claims{AccessToken: at})
		if s, ch := get("DPoP", good); s != http.StatusOK {
			t.Errorf("the holder at userinfo: %d %q", s, ch)
		}
		if s, _ := get("DPoP", good); s != http.StatusUnauthorized {
			t.Errorf("replayed proof at userinfo: %d", s)
		}
	})

	t.Run("required", func(t *testing.T) {
		e.update(func(p *config.Project) { p.RequireDPoP = true })
		defer e.update(func(p *config.Project) { p.RequireDPoP = false })
		b := e.codeFlowNoRedeem(alice, c.ID)
		if r := e.tokenWithProof(c.ID, "", b, ""); r.Status != http.StatusBadRequest || r.Str("error") != "invalid_dpop_proof" {
			t.Fatalf("no proof where the Project requires one: %d %s", r.Status, r.Raw)
		}
	})
	t.Run("registered dpop_bound_access_tokens", func(t *testing.T) {
		status, out := e.register(map[string]any{
			"client_name": "Bound", "redirect_uris": []string{loopback}, "token_endpoint_auth_method": "none",
			"grant_types": []string{"authorization_code", "refresh_token"}, "dpop_bound_access_tokens": true,
		})
		if status != http.StatusCreated || out["dpop_bound_access_tokens"] != true {
			t.Fatalf("registering: %d %v", status, out)
		}
		id, _ := out["client_id"].(string)
		if r := e.tokenWithProof(id, "", e.codeFlowNoRedeem(alice, id), ""); r.Str("error") != "invalid_dpop_proof" {
			t.Fatalf("no proof from a client that registered dpop_bound_access_tokens: %d %s", r.Status, r.Raw)
		}
	})
}

// codeFlowNoRedeem returns the form that would redeem a fresh code.
func (e *env) codeFlowNoRedeem(b *stack.Browser, clientID string) url.Values {
	e.t.Helper()
	pk := newPKCE()
	p, _ := e.authorizeAs(b, e.authorizeURL(clientID, loopback, pk, nil))
	return url.Values{"grant_type": {"authorization_code"}, "code": {codeFrom(p)}, "redirect_uri": {loopback}, "code_verifier": {pk.verifier}}
}

// TestDPoPNonce: with nonces required, a proof without one, with a made-up one, or with one
// another Project handed out, is answered use_dpop_nonce and a fresh DPoP-Nonce; signing again
// with it works.
func TestDPoPNonce(t *testing.T) {
	e := newEnv(t)
	other := e.addOtherProject()
	e.update(func(p *config.Project) {
		p.RequireDPoPNonce = true
		p.Clients["svc"] = &config.Client{ID: "svc", SecretHash: secret.Hash("svc-secret"), GrantTypes: []string{"client_credentials"}, TokenEndpointAuthMethod: "client_secret_basic"}
	})
	key := newKey(t)
	form := url.Values{"grant_type": {"client_credentials"}}
	first := e.tokenWithProof("svc", "svc-secret", form, e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{}))
	nonce := first.Header.Get("DPoP-Nonce")
	if first.Status != http.StatusBadRequest || first.Str("error") != "use_dpop_nonce" || nonce == "" {
		t.Fatalf("proof without a nonce: %d %s nonce %q", first.Status, first.Raw, nonce)
	}
	// A nonce of another Project on the same server does not pass here.
	e.Holder().Load().Project("team/other").RequireDPoPNonce = true
	req, _ := http.NewRequest(http.MethodPost, other+"/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("svc", "svc-secret")
	req.Header.Set("DPoP", e.proof(key, "POST", other+"/token", dpop.Claims{}))
	foreign := e.send(req).Header.Get("DPoP-Nonce")
	for name, n := range map[string]string{"made up": "abc.def", "another project's": foreign} {
		if r := e.tokenWithProof("svc", "svc-secret", form, e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{Nonce: n})); r.Str("error") != "use_dpop_nonce" {
			t.Errorf("%s nonce: %d %s", name, r.Status, r.Raw)
		}
	}
	ok := e.tokenWithProof("svc", "svc-secret", form, e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{Nonce: nonce}))
	if ok.Status != http.StatusOK || ok.Str("token_type") != "DPoP" {
		t.Fatalf("with the nonce: %d %s", ok.Status, ok.Raw)
	}
	// A nonce is good for its window and the next, then stale.
	e.Clock.Advance(3 * time.Minute)
	if r := e.tokenWithProof("svc", "svc-secret", form, e.proof(key, "POST", e.Issuer+"/token", dpop.Claims{Nonce: nonce})); r.Str("error") != "use_dpop_nonce" {
		t.Errorf("stale nonce: %d %s", r.Status, r.Raw)
	}
}

// TestDPoPAtTheMCPServer: mcp.ResourceServer in front of an MCP server, introspecting at the real
// Latchkey. A DPoP-bound token copied off the wire is useless without the key: as a bearer
// token, without a proof, with a proof by another key, for another URL, or with a replayed proof.
func TestDPoPAtTheMCPServer(t *testing.T) {
	e := newEnv(t)
	// The SDK's middleware reads token expiry on the wall clock.
	e.Clock.Advance(time.Since(e.Clock.Now()))
	c := e.registerPublic("Claude Desktop", loopback)
	alice := e.signedIn(stack.AliceEmail)
	key, thief := newKey(t), newKey(t)
	a := e.dpopCodeFlow(alice, c.ID, key, url.Values{"resource": {stack.MCPResource}})
	at := a.Str("access_token")

	rs := &latchkey.ResourceServer{
		Resource: stack.MCPResource, AuthorizationServer: e.Issuer, ClientID: stack.MCP, ClientSecret: stack.MCPSecret, Now: e.Clock.Now,
	}
	reached := 0
	srv := httptest.NewServer(rs.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })))
	defer srv.Close()
	call := func(scheme, proof string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(`{}`))
		req.Header.Set("Authorization", scheme+" "+at)
		if proof != "" {
			req.Header.Set("DPoP", proof)
		}
		ans := e.send(req)
		return ans.Status, strings.Join(ans.Header.Values("WWW-Authenticate"), " | ")
	}
	// Clients sign for the URL they address: the Resource.
	mk := func(k crypto.Signer, method, u string) string {
		return e.proof(k, method, u, dpop.Claims{AccessToken: at})
	}
	for name, c := range map[string]struct{ scheme, proof, want string }{
		"as a bearer token": {"Bearer", "", `DPoP algs=`},
		"without a proof":   {"DPoP", "", `error="invalid_dpop_proof"`},
		"another key":       {"DPoP", mk(thief, "POST", stack.MCPResource), `error="invalid_token"`},
		"another URL":       {"DPoP", mk(key, "POST", "https://mcp.example.test/other"), `error="invalid_dpop_proof"`},
		"another method":    {"DPoP", mk(key, "GET", stack.MCPResource), `error="invalid_dpop_proof"`},
		"proof without ath": {"DPoP", e.proof(key, "POST", stack.MCPResource, dpop.Claims{}), `error="invalid_dpop_proof"`},
	} {
		if s, ch := call(c.scheme, c.proof); s != http.StatusUnauthorized || !strings.Contains(ch, c.want) {
			t.Errorf("%s: %d %q, want 401 with %s", name, s, ch, c.want)
		}
	}
	if reached != 0 {
		t.Fatalf("the MCP handler ran %d times for refused requests", reached)
	}
	// Verify used on its own, as another middleware would, refuses the bound token too.
	bearer, _ := http.NewRequest(http.MethodPost, stack.MCPResource, nil)
	bearer.Header.Set("Authorization", "Bearer "+at)
	for name, req := range map[string]*http.Request{"no request": nil, "as a bearer token": bearer} {
		if info, err := rs.Verify(t.Context(), at, req); err == nil {
			t.Errorf("Verify with %s accepted a DPoP-bound token: %+v", name, info)
		}
	}
	good := mk(key, "POST", stack.MCPResource)
	if s, ch := call("DPoP", good); s != http.StatusOK || reached != 1 {
		t.Fatalf("the holder: %d %q", s, ch)
	}
	if s, ch := call("DPoP", good); s != http.StatusUnauthorized || !strings.Contains(ch, "already used") {
		t.Errorf("replayed proof: %d %q", s, ch)
	}
}
