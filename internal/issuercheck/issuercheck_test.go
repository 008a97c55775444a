package issuercheck_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/issuercheck"
	"latchkey.dev/latchkey/test/stack"
)

// The checks run against a real server (webhook.Server with a compiled Project, on SQLite), as
// the chart's test Pod runs them against the Service.
func TestRun(t *testing.T) {
	s := stack.New(t, stack.Options{DSN: "sqlite:" + t.TempDir() + "/latchkey.db"})
	// The Service: another address for the same server; the public URL stays the front's.
	service := httptest.NewServer(s.Front.Config.Handler)
	defer service.Close()
	client := &http.Client{Timeout: 10 * time.Second}

	for _, c := range []struct {
		name    string
		o       issuercheck.Options
		failing []string // checks that must fail, by a word of their name and of their error
	}{
		{name: "the public URL", o: issuercheck.Options{PublicURL: s.Front.URL, Projects: []string{stack.ProjectKey}}},
		{name: "through the Service", o: issuercheck.Options{PublicURL: s.Front.URL + "/", Via: service.URL, Projects: []string{stack.ProjectKey}}},
		{name: "only the server", o: issuercheck.Options{PublicURL: s.Front.URL, Via: service.URL}},
		{
			name:    "a Project that does not exist",
			o:       issuercheck.Options{PublicURL: s.Front.URL, Via: service.URL, Projects: []string{stack.ProjectKey, "team/nope"}},
			failing: []string{"team/nope/.well-known/oauth-authorization-server: HTTP 404"},
		},
		{
			// The chart's publicURL is not the server's: clients would refuse every token.
			name:    "the server answers under another public URL",
			o:       issuercheck.Options{PublicURL: "https://auth.example.com", Via: service.URL, Projects: []string{stack.ProjectKey}},
			failing: []string{"publishes its metadata: the metadata names the issuer"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Client = client
			results, err := issuercheck.Run(context.Background(), c.o)
			if err != nil {
				t.Fatal(err)
			}
			want := 1 + 2*len(c.o.Projects) - len(c.failing)
			if len(results) != want {
				t.Errorf("%d results, want %d: %v", len(results), want, results)
			}
			for _, r := range results {
				line := r.What
				if r.Err != nil {
					line += ": " + r.Err.Error()
				}
				expected := false
				for _, f := range c.failing {
					expected = expected || strings.Contains(line, f)
				}
				if (r.Err != nil) != expected {
					t.Errorf("%s (want it to fail: %v)", line, expected)
				}
			}
		})
	}
}

func TestRunRefusesBadArguments(t *testing.T) {
	for _, o := range []issuercheck.Options{
		{PublicURL: "auth.example.com"},
		{PublicURL: "https://auth.example.com", Via: "http://svc/path"},
		{PublicURL: "https://auth.example.com", Projects: []string{"demo"}},
		{PublicURL: "https://auth.example.com", Projects: []string{"team/"}},
	} {
		if _, err := issuercheck.Run(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// The metadata decides where the key set is fetched from; an address outside the public URL is
// not followed (a server answering with someone else's jwks_uri would make the check vouch for it).
func TestKeysOnlyUnderThePublicURL(t *testing.T) {
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/-/readyz":
		case "/team/demo/.well-known/oauth-authorization-server":
			iss := srv.URL + "/team/demo"
			w.Write([]byte(`{"issuer":"` + iss + `","authorization_endpoint":"` + iss + `/authorize","token_endpoint":"` + iss +
				`/token","jwks_uri":"https://elsewhere.example/jwks.json","code_challenge_methods_supported":["S256"]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	results, err := issuercheck.Run(context.Background(), issuercheck.Options{PublicURL: srv.URL, Projects: []string{"team/demo"}})
	if err != nil {
		t.Fatal(err)
	}
	if last := results[len(results)-1]; last.Err == nil || !strings.Contains(last.Err.Error(), "not under the public URL") {
		t.Fatalf("keys check: %+v", last)
	}
}
