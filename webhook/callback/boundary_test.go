package callback_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/funcr"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

// publish replaces the harness's project with p.
func publish(h *stack.Stack, p *config.Project) {
	v := h.Holder().Load().Version + 1
	h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{stack.ProjectKey: p}, Version: v})
}

// withConnector returns the harness's project with one more connector.
func withConnector(h *stack.Stack, c *config.Connector) *config.Project {
	p := *h.Project
	p.Connectors = maps.Clone(p.Connectors)
	p.ConnectorsByAudience = maps.Clone(p.ConnectorsByAudience)
	p.Connectors[c.Key] = c
	p.ConnectorsByAudience[c.Audience] = c
	return &p
}

// tokenServer counts the requests that reach it and answers as a token endpoint would.
func tokenServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"access_token":"stolen","token_type":"bearer"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// A tenant points its Connector's token endpoint at an address only the server can reach: its
// own loopback, or the cloud metadata service. The person who connects is refused with a page
// that says why, the address never receives a request, and nothing is saved. The Project's
// explicit allowance opens a loopback range, but never the link-local metadata address.
func TestCallbackNeverDialsAnAddressTheProjectDoesNotAllow(t *testing.T) {
	internal, hits := tokenServer(t)
	metadata := "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
	for _, tc := range []struct {
		name     string
		tokenURL string
		allowed  []netip.Prefix
		dialled  bool
	}{
		{"loopback, not allowed", internal.URL + "/token", nil, false},
		{"cloud metadata, not allowed", metadata, nil, false},
		{"cloud metadata, whatever the Project lists", metadata, []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("0.0.0.0/0")}, false},
		{"loopback, allowed by the Project", internal.URL + "/token", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits.Store(0)
			h, res := connectThrough(t, tc.tokenURL, tc.allowed)
			if tc.dialled {
				if hits.Load() != 1 {
					t.Fatalf("the allowed address received %d requests, want 1", hits.Load())
				}
				return
			}
			assertPrivate(t, res)
			assertNotDialled(t, h, res, hits.Load())
			if r := lastAudit(t, h, "connection.failed"); r.Details["reason"] != "address_not_allowed" {
				t.Errorf("audit reason %q", r.Details["reason"])
			}
		})
	}
}

// connectThrough has Alice connect GitHub through a copy of the harness's Connector whose token
// endpoint is tokenURL and which may dial only the allowed ranges; it returns the harness and
// the callback's page.
func connectThrough(t *testing.T, tokenURL string, allowed []netip.Prefix) (*stack.Stack, stack.Page) {
	t.Helper()
	h := stack.New(t, stack.Options{Audit: true})
	c := *h.Connector
	c.TokenURL, c.AllowedNetworks = tokenURL, allowed
	p := *h.Project
	p.Connectors = map[string]*config.Connector{c.Key: &c}
	p.ConnectorsByAudience = map[string]*config.Connector{c.Audience: &c}
	publish(h, &p)
	b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	return h, b.MustGet(atGitHub(t, h, b, stack.AliceLogin, authURL))
}

// assertNotDialled checks a callback whose token endpoint the Connector may not dial: the person
// is told so, the address received nothing (hits), and no connection was saved.
func assertNotDialled(t *testing.T, h *stack.Stack, res stack.Page, hits int64) {
	t.Helper()
	if res.Status != http.StatusBadGateway || !strings.Contains(res.Text(), "cannot be reached from here") {
		t.Errorf("callback answered %d: %s", res.Status, res.Text())
	}
	if hits != 0 {
		t.Errorf("the address received %d requests", hits)
	}
	if n := len(h.Connections(stack.AliceEmail)); n != 0 {
		t.Errorf("%d connections saved", n)
	}
}

// Mix-up (RFC 9700 §4.4): a team adds a Connector to the Project that sends people to the honest
// GitHub, with the honest app's client id, but redeems codes at its own token endpoint. It gets
// its own callback URL, which the honest app never registered, so GitHub refuses to send the
// code there; and a state started for the honest connector that is carried to the team's
// callback path is refused there, nothing exchanged, nothing consumed.
func TestCallbackOfOneConnectorNeverFinishesAnother(t *testing.T) {
	h := stack.New(t, stack.Options{Audit: true})
	attacker, hits := tokenServer(t)
	evil := *h.Connector
	evil.Key, evil.Namespace, evil.Name, evil.DisplayName, evil.Audience = "tenant/evil", "tenant", "evil", "Evil", "evil"
	evil.TokenURL, evil.UserInfoURL = attacker.URL+"/token", attacker.URL+"/user"
	evil.CallbackURL = h.Issuer + config.CallbackPath("tenant", "evil")
	publish(h, withConnector(h, &evil))

	t.Run("the honest service does not send the team's connector a code", func(t *testing.T) {
		b := h.Browser()
		b.MustSignIn(stack.AliceEmail, stack.AlicePassword)
		res := b.PressOnAccount("Connect Evil")
		if res.Status != http.StatusSeeOther {
			t.Fatalf("Connect answered %d: %s", res.Status, res.Text())
		}
		b.SignInGitHub(stack.AliceLogin)
		h.GitHub.Approve(stack.AliceLogin, stack.GitHubClientID)
		res = b.MustGet(res.Location())
		if loc := res.Location(); res.Status == http.StatusFound && strings.Contains(loc, "code=") {
			b.MustGet(loc)
			t.Errorf("GitHub sent a code to %s", loc)
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("the team's token endpoint received %d requests", n)
		}
	})

	t.Run("a state is refused at another connector's callback", func(t *testing.T) {
		b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
		cb := atGitHub(t, h, b, stack.AliceLogin, authURL)
		u, _ := url.Parse(cb)
		states := count(t, h, "callback_states")
		for _, b := range []*stack.Browser{b, h.Browser()} {
			res := b.MustGet(evil.CallbackURL + "?" + u.RawQuery)
			assertPrivate(t, res)
			if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), "expired or has already been used") {
				t.Errorf("the team's callback answered %d: %s", res.Status, res.Text())
			}
			res = b.MustPost(evil.CallbackURL, url.Values{"code": {u.Query().Get("code")}, "state": {u.Query().Get("state")}, "confirm_token": {"x"}})
			if res.Status != http.StatusBadRequest {
				t.Errorf("POST at the team's callback answered %d: %s", res.Status, res.Text())
			}
			// An error report at the wrong callback does not end the attempt either.
			b.MustGet(evil.CallbackURL + "?error=access_denied&state=" + url.QueryEscape(u.Query().Get("state")))
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("the team's token endpoint received %d requests", n)
		}
		if n := count(t, h, "callback_states"); n != states {
			t.Errorf("%d state rows left of %d: the wrong callback consumed one", n, states)
		}
		// The person's own attempt is intact and finishes at its own callback.
		if res := b.MustGet(cb); res.Status != http.StatusOK || !strings.Contains(res.Text(), "is now connected") {
			t.Errorf("own callback answered %d: %s", res.Status, res.Text())
		}
	})

	t.Run("the old shared callback finishes nothing", func(t *testing.T) {
		b, authURL := start(t, h, stack.MalloryEmail, stack.MalloryPassword)
		cb := atGitHub(t, h, b, stack.MalloryLogin, authURL)
		u, _ := url.Parse(cb)
		calls := h.GitHub.ExchangeCalls()
		res := b.MustGet(h.Issuer + "/connectors/callback?" + u.RawQuery)
		assertPrivate(t, res)
		if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), "no longer uses") {
			t.Errorf("old callback answered %d: %s", res.Status, res.Text())
		}
		if h.GitHub.ExchangeCalls() != calls || hits.Load() != 0 {
			t.Error("the old callback exchanged a code")
		}
	})
}

// RFC 9207: an OIDC connector's callback carrying another issuer's iss, or none when the
// service promises to send it, is refused before any code is exchanged, and the attempt stays.
func TestCallbackRefusesAnotherIssuer(t *testing.T) {
	var promise atomic.Bool
	var issuer string
	discovery := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": issuer, "authorization_endpoint": issuer + "/auth",
			"token_endpoint": issuer + "/token", "jwks_uri": issuer + "/jwks",
			"authorization_response_iss_parameter_supported": promise.Load()})
	}))
	defer discovery.Close()
	issuer = discovery.URL

	for _, tc := range []struct {
		name    string
		iss     string // appended as is
		promise bool
	}{
		{"another issuer", "&iss=" + url.QueryEscape("https://honest.example"), false},
		{"the issuer twice", "&iss=" + url.QueryEscape(issuer) + "&iss=" + url.QueryEscape(issuer), false},
		{"no iss where the service promises one", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			promise.Store(tc.promise)
			h := stack.New(t, stack.Options{Audit: true})
			h.Connector.OIDCIssuer = issuer // before any request: the snapshot holds this pointer
			b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
			cb := atGitHub(t, h, b, stack.AliceLogin, authURL)
			res := b.MustGet(cb + tc.iss)
			assertPrivate(t, res)
			if res.Status != http.StatusBadRequest || !strings.Contains(res.Text(), "Nothing was connected") {
				t.Errorf("callback answered %d: %s", res.Status, res.Text())
			}
			if n := h.GitHub.ExchangeCalls(); n != 0 {
				t.Errorf("%d codes exchanged", n)
			}
			if n := count(t, h, "callback_states"); n != 1 {
				t.Errorf("%d state rows, want the attempt kept", n)
			}
		})
	}
}

// A token endpoint that refuses with a body full of secrets (an echoed client secret, a token):
// the log says which connector, the HTTP status and the OAuth error code, and nothing of the
// body or the error_description.
func TestExchangeFailureLogsNoUpstreamBody(t *testing.T) {
	const leak = "ghs_SeCrEt0123456789"
	var mu sync.Mutex
	var logged bytes.Buffer
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(&logged, prefix, args)
	}, funcr.Options{Verbosity: 10})
	h := stack.New(t, stack.Options{Audit: true, Logger: log})
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"client_secret=%s rejected","echo":%q}`, leak, r.FormValue("client_secret"))
	}))
	defer refusing.Close()
	h.Connector.TokenURL = refusing.URL // before any request: the snapshot holds this pointer

	b, authURL := start(t, h, stack.AliceEmail, stack.AlicePassword)
	res := b.MustGet(atGitHub(t, h, b, stack.AliceLogin, authURL))
	if res.Status != http.StatusBadRequest {
		t.Fatalf("callback answered %d: %s", res.Status, res.Text())
	}
	mu.Lock()
	out := logged.String()
	mu.Unlock()
	if !strings.Contains(out, "upstream code exchange failed") || !strings.Contains(out, `"upstream_status"=400`) ||
		!strings.Contains(out, `"upstream_error"="invalid_grant"`) {
		t.Errorf("the log does not say what failed:\n%s", out)
	}
	for _, secret := range []string{leak, h.Connector.ClientSecret, "rejected"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log carries %q from the service's answer:\n%s", secret, out)
		}
	}
}
