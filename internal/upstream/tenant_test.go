package upstream_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/internal/upstream/fakeoauth"
)

// entra is a small Microsoft identity platform for one app registered in many tenants, as
// https://learn.microsoft.com/entra/identity-platform/v2-protocols-oidc describes it: the
// common discovery document names the issuer https://{host}/{tenantid}/v2.0, each ID token's
// iss names its tenant and its tid claim says the same. The app authenticates with a
// certificate credential (private_key_jwt with x5t#S256). idClaims lets a test forge what the
// next ID token says, as a hostile or confused tenant could.
type entra struct {
	srv   *httptest.Server
	clk   *testclock.Clock
	check fakeoauth.AssertionCheck
	idKey *rsa.PrivateKey

	mu       sync.Mutex
	seen     map[string]bool
	idClaims map[string]any
	token    []map[string]string // the token requests' forms
	revoked  []string
}

const entraClient = "6731de76-14a6-49ae-97bc-6eba6914391e"

func newEntra(t *testing.T) (*entra, *config.ClientAssertion) {
	t.Helper()
	appKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "latchkey"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &appKey.PublicKey, appKey)
	s256 := sha256.Sum256(der)
	idKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	e := &entra{clk: testclock.New(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)), idKey: idKey, seen: map[string]bool{},
		check: fakeoauth.AssertionCheck{ClientID: entraClient, Key: &appKey.PublicKey,
			X5TS256: base64.RawURLEncoding.EncodeToString(s256[:]), MaxLifetime: 10 * time.Minute}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /common/v2.0/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		base := e.srv.URL
		writeJSON(w, map[string]any{"issuer": base + "/{tenantid}/v2.0", "authorization_endpoint": base + "/common/oauth2/v2.0/authorize",
			"token_endpoint": base + "/common/oauth2/v2.0/token", "jwks_uri": base + "/common/discovery/v2.0/keys",
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /common/discovery/v2.0/keys", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &idKey.PublicKey, KeyID: "entra-1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /common/oauth2/v2.0/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		form := map[string]string{}
		for k := range r.PostForm {
			form[k] = r.PostForm.Get(k)
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.token = append(e.token, form)
		// https://learn.microsoft.com/entra/identity-platform/v2-oauth2-auth-code-flow#request-an-access-token-with-a-certificate-credential
		if form["client_assertion_type"] != fakeoauth.ClientAssertionType || form["client_secret"] != "" || form["client_id"] != entraClient {
			w.WriteHeader(http.StatusUnauthorized)
			writeJSON(w, map[string]any{"error": "invalid_client", "error_codes": []int{7000218}})
			return
		}
		if err := e.check.VerifyClientAssertion(form["client_assertion"], e.srv.URL+"/common/oauth2/v2.0/token", e.clk.Now(), e.seen); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			writeJSON(w, map[string]any{"error": "invalid_client", "error_description": err.Error()})
			return
		}
		claims := map[string]any{"iss": e.srv.URL + "/72f988bf-86f1-41af-91ab-2d7cd011db47/v2.0", "tid": "72f988bf-86f1-41af-91ab-2d7cd011db47",
			"aud": entraClient, "sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ", "oid": "00000000-0000-0000-66f3-3332eca7ea81",
			"preferred_username": "alice@contoso.example", "ver": "2.0", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
		for k, v := range e.idClaims {
			claims[k] = v
		}
		signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: idKey, KeyID: "entra-1"}}, (&jose.SignerOptions{}).WithType("JWT"))
		b, _ := json.Marshal(claims)
		obj, _ := signer.Sign(b)
		idt, _ := obj.CompactSerialize()
		writeJSON(w, map[string]any{"token_type": "Bearer", "scope": "openid offline_access User.Read", "expires_in": 3599,
			"access_token": "eyJ0eXAiOi" + randomish(), "refresh_token": "0.ARwA" + randomish(), "id_token": idt})
	})
	// Microsoft has no revocation endpoint; this one stands for any RFC 7009 service that takes
	// the same client authentication.
	mux.HandleFunc("POST /revoke", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		e.mu.Lock()
		defer e.mu.Unlock()
		e.revoked = append(e.revoked, r.PostForm.Get("token"))
		if r.PostForm.Get("client_secret") != "" || r.PostForm.Get("client_assertion_type") != fakeoauth.ClientAssertionType ||
			e.check.VerifyClientAssertion(r.PostForm.Get("client_assertion"), e.srv.URL+"/common/oauth2/v2.0/token", e.clk.Now(), e.seen) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			writeJSON(w, map[string]any{"error": "invalid_client"})
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e, &config.ClientAssertion{Key: appKey, Algorithm: "RS256", X5TS256: e.check.X5TS256}
}

func randomish() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (e *entra) connector(a *config.ClientAssertion, allowed ...string) *config.Connector {
	return &config.Connector{Key: "default/microsoft", AllowedNetworks: netguard.Loopback, ClientID: entraClient, CallbackURL: callbackURL,
		AuthURL: e.srv.URL + "/common/oauth2/v2.0/authorize", TokenURL: e.srv.URL + "/common/oauth2/v2.0/token",
		OIDCIssuer: e.srv.URL + "/common/v2.0", TenantClaim: "tid", AllowedTenants: allowed,
		TokenAuth: config.TokenAuthPrivateKeyJWT, Assertion: a, AccountIDField: "oid", AccountNameField: "preferred_username"}
}

// TestMultiTenantIDTokenIssuer plays the tenants of a multi-tenant app: an ID token is
// accepted only when its iss is the issuer of the tenant its own tid claim names, and, where
// the connector restricts tenants, only from those. A tenant that signs in its people with an
// iss of another tenant, or a token naming a tenant the connector does not admit, connects
// nothing.
func TestMultiTenantIDTokenIssuer(t *testing.T) {
	const contoso, fabrikam = "72f988bf-86f1-41af-91ab-2d7cd011db47", "9188040d-6c67-4c5b-b112-36a304b66dad"
	tests := []struct {
		name    string
		allowed []string
		claims  map[string]any // overrides; "iss" is a tenant, filled into the issuer
		want    error
	}{
		{"its own tenant", nil, nil, nil},
		{"its own tenant, admitted", []string{fabrikam, strings.ToUpper(contoso)}, nil, nil},
		{"iss of another tenant than tid", nil, map[string]any{"iss": fabrikam}, upstream.ErrIssuer},
		{"tid of another tenant than iss", nil, map[string]any{"tid": fabrikam}, upstream.ErrIssuer},
		{"the template itself as iss", nil, map[string]any{"iss": "{tenantid}", "tid": "{tenantid}"}, upstream.ErrIssuer},
		{"a tid that is a path", nil, map[string]any{"iss": contoso + "/v2.0/x", "tid": contoso + "/v2.0/x"}, upstream.ErrIssuer},
		{"no tid", nil, map[string]any{"tid": nil}, upstream.ErrIssuer},
		{"a tenant the connector does not admit", []string{fabrikam}, nil, upstream.ErrTenant},
		{"a consistent token of a tenant not admitted", []string{contoso}, map[string]any{"iss": fabrikam, "tid": fabrikam}, upstream.ErrTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, key := newEntra(t)
			e.idClaims = map[string]any{}
			for k, v := range tt.claims {
				if k == "iss" {
					v = e.srv.URL + "/" + v.(string) + "/v2.0"
				}
				e.idClaims[k] = v
			}
			c := e.connector(key, tt.allowed...)
			acct, _, err := upstream.Exchange(upstream.WithClock(t.Context(), e.clk.Now), e.srv.Client(), c, "code", "verifier")
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if acct != (upstream.Account{ID: "00000000-0000-0000-66f3-3332eca7ea81", Name: "alice@contoso.example"}) {
					t.Fatalf("account %+v", acct)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Exchange = %+v, %v; want %v", acct, err, tt.want)
			}
		})
	}
}

// TestMultiTenantResponseIssuer is RFC 9207 at the callback of a multi-tenant connector: an
// authorization response's iss must be the issuer of some tenant the connector admits.
func TestMultiTenantResponseIssuer(t *testing.T) {
	e, key := newEntra(t)
	const contoso, fabrikam = "72f988bf-86f1-41af-91ab-2d7cd011db47", "9188040d-6c67-4c5b-b112-36a304b66dad"
	restricted := e.connector(key, contoso)
	open := e.connector(key)
	open.Key = "default/microsoft-any"
	tests := []struct {
		name string
		c    *config.Connector
		iss  string
		ok   bool
	}{
		{"an admitted tenant", restricted, e.srv.URL + "/" + contoso + "/v2.0", true},
		{"any tenant where all are admitted", open, e.srv.URL + "/" + fabrikam + "/v2.0", true},
		{"a tenant not admitted", restricted, e.srv.URL + "/" + fabrikam + "/v2.0", false},
		{"the template", open, e.srv.URL + "/{tenantid}/v2.0", false},
		{"another host", open, "https://login.evil.example/" + contoso + "/v2.0", false},
		{"a path in the tenant's place", open, e.srv.URL + "/" + contoso + "/x/v2.0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := upstream.CheckIssuer(t.Context(), e.srv.Client(), tt.c, tt.iss, true)
			if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, upstream.ErrIssuer)) {
				t.Fatalf("CheckIssuer(%q) = %v; want ok %v", tt.iss, err, tt.ok)
			}
		})
	}
	// Entra ID does not promise iss, so a response without it goes on to the ID token check.
	if err := upstream.CheckIssuer(t.Context(), e.srv.Client(), open, "", false); err != nil {
		t.Fatalf("no iss: %v", err)
	}
}

// TestPrivateKeyJWT: a private_key_jwt connector authenticates every token request with a
// fresh client assertion (RFC 7523) the service verifies against the app's certificate: iss and
// sub the client id, aud the token endpoint, a new jti each time, exp minutes from the injected
// clock; and never sends a client secret.
func TestPrivateKeyJWT(t *testing.T) {
	e, key := newEntra(t)
	c := e.connector(key)
	ctx := upstream.WithClock(t.Context(), e.clk.Now)
	if _, _, err := upstream.Exchange(ctx, e.srv.Client(), c, "code", "verifier"); err != nil {
		t.Fatal(err)
	}
	// A day later on the injected clock the assertion is made for then, not for the wall clock.
	e.clk.Advance(24 * time.Hour)
	if _, _, err := upstream.Exchange(ctx, e.srv.Client(), c, "code", "verifier"); err != nil {
		t.Fatalf("second exchange: %v", err)
	}
	if len(e.token) != 2 || e.token[0]["client_assertion"] == e.token[1]["client_assertion"] {
		t.Fatalf("token requests %v; want two, each with its own assertion", len(e.token))
	}
	// Revocation authenticates the same way, one fresh assertion per token.
	c.RevocationURL = e.srv.URL + "/revoke"
	v := &upstream.Vault{Keyring: keyring(t, "a", "a"), Now: e.clk.Now, HTTP: e.srv.Client()}
	conn := store.Connection{ID: "c1", Project: project, Connector: c.Key}
	v.Seal(&conn, &oauth2.Token{AccessToken: "at-1", RefreshToken: "rt-1"})
	if err := v.Revoke(t.Context(), c, conn); err != nil {
		t.Fatalf("revocation with a client assertion: %v", err)
	}
	if len(e.revoked) != 2 {
		t.Fatalf("revoked %v; want the refresh and the access token", e.revoked)
	}
	// Another key (a certificate the app never registered) is refused by the service.
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	forged := *key
	forged.Key = other
	if _, _, err := upstream.Exchange(ctx, e.srv.Client(), e.connector(&forged), "code", "verifier"); !errors.Is(err, upstream.ErrService) {
		t.Fatalf("a foreign key: %v", err)
	}
}
