package oauth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/test/stack"
)

// Failed client authentication at the token endpoint: each way of failing is recorded with its
// reason, the claimed client id and the method, while every one of them answers the same
// invalid_client (no oracle for which client ids exist). A malformed request is not recorded.
func TestAuditTrailOfClientAuthentication(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	sink := s.NewAuditSink()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's key, in the name of "web", which authenticates with a secret.
	forged, err := jwt.Signed(signer).Claims(jwt.Claims{Issuer: "web", Subject: "web", Audience: jwt.Audience{s.Issuer},
		Expiry: jwt.NewNumericDate(s.Clock.Now().Add(time.Minute)), ID: "j1"}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	form := func(kv ...string) url.Values {
		f := url.Values{"grant_type": {"client_credentials"}}
		for i := 0; i < len(kv); i += 2 {
			f.Set(kv[i], kv[i+1])
		}
		return f
	}
	attempts := []struct {
		name                    string
		form                    url.Values
		user, pass              string
		reason, method, claimed string
	}{
		{"a wrong secret", form(), "web", "not-the-secret", "wrong_secret", "client_secret_basic", "web"},
		{"an unknown client", form(), "nobody", "x", "unknown_client", "client_secret_basic", "nobody"},
		{"a wrong secret in the form", form("client_id", "web", "client_secret", "nope"), "", "", "wrong_secret", "client_secret_post", "web"},
		{"no credentials from a confidential client", form("client_id", "web"), "", "", "credentials_required", "none", "web"},
		{"an assertion signed by another key", form("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
			"client_assertion", forged), "", "", "method_not_allowed", "client_assertion", "web"},
	}
	var answer string
	for _, a := range attempts {
		r := s.Token(a.form, a.user, a.pass)
		if r.Status != http.StatusUnauthorized || r.Str("error") != "invalid_client" {
			t.Fatalf("%s: %d %s, want 401 invalid_client", a.name, r.Status, r.Raw)
		}
		if a.method != "client_assertion" && a.method != "none" {
			if answer == "" {
				answer = r.Str("error_description")
			} else if d := r.Str("error_description"); d != answer {
				t.Errorf("%s is answered %q, another failure %q: the answer tells them apart", a.name, d, answer)
			}
		}
	}
	// Two methods at once is a malformed request, not a failed authentication.
	if r := s.Token(form("client_secret", "x"), stack.Web, stack.WebSecret); r.Status != http.StatusBadRequest {
		t.Fatalf("two methods: %d %s", r.Status, r.Raw)
	}

	s.TrailTo(sink, events.ClientAuthFailed) // reaches the sink, like every record
	recs, err := s.Admin.ListAudit(t.Context(), stack.ProjectKey, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		if r.Action == events.ClientAuthFailed {
			if r.Outcome != store.OutcomeRefused || r.Details["endpoint"] != "/"+stack.ProjectKey+"/token" {
				t.Errorf("record %+v", r)
			}
			got = append(got, r.Reason+" "+r.Details["method"]+" "+r.Target+" "+r.Actor)
		}
	}
	var want []string
	for _, a := range attempts {
		want = append(want, a.reason+" "+a.method+" "+a.claimed+" client:"+a.claimed)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("client.authentication_failed records:\n got %q\nwant %q", got, want)
	}
}
