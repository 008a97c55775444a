package main

import (
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/controllers/configdir"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream"
)

// demoConnectors compiles config/samples as `make run-local` serves it and returns the demo
// Project's connectors by name.
func demoConnectors(t *testing.T) map[string]*config.Connector {
	t.Helper()
	holder := &config.Holder{}
	sa, err := controllers.NewStandalone(controllers.Options{PublicURL: "http://127.0.0.1:8080", Config: holder}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	src, err := configdir.New(configdir.Options{Dir: "../../" + samplesDir, DataDir: t.TempDir(), Standalone: sa, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := holder.Load().Project(demoNamespace + "/demo")
	if p == nil {
		t.Fatal("config/samples compiles without the demo Project")
	}
	out := map[string]*config.Connector{}
	for _, c := range p.Connectors {
		out[c.Name] = c
	}
	return out
}

// TestDemoConnectors: the demo Project offers three services, each Ready and pointing at the
// fake the demo starts for it, and each connects: the fake GitHub as before, the fake Linear
// through its sign-in page and the linear preset's dialect, and the key service with the demo
// key printed at start (and not with another).
func TestDemoConnectors(t *testing.T) {
	cs := demoConnectors(t)
	gh, lin, keys := cs["github"], cs["linear"], cs["keyservice"]
	if gh == nil || lin == nil || keys == nil {
		t.Fatalf("demo connectors = %v; want github, linear and keyservice", cs)
	}
	if !strings.HasPrefix(gh.TokenURL, "http://"+fakeGitHubAddr+"/") || !strings.HasPrefix(lin.TokenURL, "http://"+fakeLinearAddr+"/") ||
		keys.APIKey == nil || !strings.HasPrefix(keys.APIKey.CheckURL, "http://"+keyServiceAddr+"/") {
		t.Fatalf("the sample connectors do not point at the demo's fakes: %s, %s, %+v", gh.TokenURL, lin.TokenURL, keys.APIKey)
	}
	for _, c := range []*config.Connector{gh, lin, keys} {
		if !slices.ContainsFunc(c.AllowedNetworks, func(p netip.Prefix) bool { return p.Contains(netip.MustParseAddr("127.0.0.1")) }) {
			t.Errorf("%s: the demo Project does not let it dial 127.0.0.1: %v", c.Key, c.AllowedNetworks)
		}
	}

	t.Run("key service", func(t *testing.T) {
		srv := httptest.NewServer(keyService())
		defer srv.Close()
		c := *keys
		k := *keys.APIKey
		k.CheckURL = srv.URL + keyServiceCheckPath
		c.APIKey = &k
		acct, err := upstream.CheckAPIKey(t.Context(), nil, &c, demoKeys[0].Key)
		if err != nil || acct.ID != "2001" || acct.Name != "alice-keys" {
			t.Fatalf("alice's demo key: %+v, %v", acct, err)
		}
		if _, err := upstream.CheckAPIKey(t.Context(), nil, &c, "lk_demo_guess"); err == nil {
			t.Fatal("the key service accepted a key it never issued")
		}
	})

	t.Run("linear", func(t *testing.T) {
		srv := httptest.NewServer(fakeLinear(lin.CallbackURL))
		defer srv.Close()
		c := *lin
		c.AuthURL, c.TokenURL, c.UserInfoURL, c.RevocationURL = srv.URL+"/oauth/authorize", srv.URL+"/oauth/token", srv.URL+"/graphql", srv.URL+"/oauth/revoke"
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		verifier := upstream.NewVerifier()
		authURL := upstream.AuthURL(&c, "state-1", verifier)
		page, err := browser.Get(authURL)
		if err != nil || page.StatusCode != http.StatusOK {
			t.Fatalf("the fake Linear's sign-in page: %v %v", page, err)
		}
		page.Body.Close()
		u, _ := url.Parse(authURL)
		signedIn, err := browser.PostForm(srv.URL+"/sign-in", url.Values{"login": {"alice-linear"}, "next": {u.RequestURI()}})
		if err != nil || signedIn.StatusCode != http.StatusSeeOther {
			t.Fatalf("signing in at the fake Linear: %v %v", signedIn, err)
		}
		signedIn.Body.Close()
		back, err := browser.Get(srv.URL + signedIn.Header.Get("Location"))
		if err != nil {
			t.Fatal(err)
		}
		back.Body.Close()
		cb, _ := url.Parse(back.Header.Get("Location"))
		if back.StatusCode != http.StatusFound || !strings.HasPrefix(cb.String(), lin.CallbackURL+"?") {
			t.Fatalf("authorize answered %d, Location %q", back.StatusCode, cb)
		}
		acct, tok, err := upstream.Exchange(t.Context(), nil, &c, cb.Query().Get("code"), verifier)
		if err != nil || acct.ID != "lin-alice" || tok.AccessToken == "" {
			t.Fatalf("connecting the fake Linear: %+v, %v", acct, err)
		}
	})
}
