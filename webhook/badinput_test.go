package webhook_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/test/stack"
)

// Bad input of every kind gets a clear error in its protocol's shape: RFC 6749 JSON at the
// OAuth endpoints, RFC 7591 JSON at registration, an HTML page at the pages. Never a 500, never
// a redirect to an address the client did not register, and nothing stored changes.
func TestBadInput(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	b := s.Browser()
	b.SignInPage("", stack.AliceEmail, stack.AlicePassword)
	pk := stack.NewPKCE()

	type expect struct {
		status int
		json   string // the "error" member of a JSON answer; "" for an HTML page
		// location, when set, must prefix the Location header (a registered redirect URI);
		// otherwise there must be none.
		location string
	}
	raw := func(method, path, ctype string, body []byte, hdr map[string]string) *http.Request {
		req, err := http.NewRequest(method, s.Issuer+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return req
	}
	form := "application/x-www-form-urlencoded"
	basic := func(id, secret string) map[string]string {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
		return map[string]string{"Authorization": r.Header.Get("Authorization")}
	}
	web := basic(stack.Web, stack.WebSecret)
	jsonBody := func(v any) []byte {
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	many := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	authorize := func(extra string) string {
		q := url.Values{
			"response_type": {"code"}, "client_id": {"web"}, "state": {"s"},
			"code_challenge": {pk.Challenge}, "code_challenge_method": {"S256"},
		}
		return "/authorize?" + q.Encode() + extra
	}

	cases := []struct {
		name string
		req  *http.Request
		want expect
	}{
		// The token endpoint.
		{"token: body over 64 KiB", raw("POST", "/token", form, []byte("grant_type=client_credentials&pad="+strings.Repeat("a", 70<<10)), web), expect{413, "invalid_request", ""}},
		{"token: malformed form", raw("POST", "/token", form, []byte("grant_type=%zz&x=%"), web), expect{400, "invalid_request", ""}},
		{"token: JSON instead of a form", raw("POST", "/token", "application/json", []byte(`{"grant_type":"client_credentials"}`), web), expect{400, "invalid_request", ""}},
		{"token: no content type", raw("POST", "/token", "", []byte("grant_type=client_credentials"), web), expect{400, "invalid_request", ""}},
		{"token: repeated grant_type", raw("POST", "/token", form, []byte("grant_type=authorization_code&grant_type=client_credentials"), web), expect{400, "invalid_request", ""}},
		{"token: repeated code", raw("POST", "/token", form, []byte("grant_type=authorization_code&code=a&code=b"), web), expect{400, "invalid_request", ""}},
		{"token: unknown grant type", raw("POST", "/token", form, []byte("grant_type=urn:example:made-up"), web), expect{400, "unsupported_grant_type", ""}},
		{"token: grant type with invalid UTF-8", raw("POST", "/token", form, []byte("grant_type=%FF%FE"), web), expect{400, "unsupported_grant_type", ""}},
		{"token: code with invalid UTF-8 and NUL", raw("POST", "/token", form, []byte("grant_type=authorization_code&code=%FF%00%FE&redirect_uri=https%3A%2F%2Fapp.example%2Fcb&code_verifier="+pk.Verifier), web), expect{400, "invalid_grant", ""}},
		{"token: no grant type", raw("POST", "/token", form, []byte("scope=read"), web), expect{400, "invalid_request", ""}},
		{"token: empty body", raw("POST", "/token", form, nil, web), expect{400, "invalid_request", ""}},
		{"token: GET", raw("GET", "/token?grant_type=client_credentials", "", nil, web), expect{405, "invalid_request", ""}},
		{"token: client id with invalid UTF-8", raw("POST", "/token", form, []byte("grant_type=client_credentials"), basic("\xff\xfe", "x")), expect{401, "invalid_client", ""}},
		{"token: Basic credentials not base64", raw("POST", "/token", form, []byte("grant_type=client_credentials"), map[string]string{"Authorization": "Basic ***not base64***"}), expect{401, "invalid_client", ""}},
		{"token: Authorization header of 48 KiB", raw("POST", "/token", form, []byte("grant_type=client_credentials"), map[string]string{"Authorization": "Basic " + strings.Repeat("QUFB", 12<<10)}), expect{401, "invalid_client", ""}},
		{"token: thousands of scopes", raw("POST", "/token", form, []byte("grant_type=client_credentials&scope="+url.QueryEscape(strings.Join(many(5000, func(i int) string { return "s" }), " "))), basic(stack.Service, stack.ServiceSecret)), expect{400, "invalid_scope", ""}},
		{"token: scope with control characters", raw("POST", "/token", form, []byte("grant_type=client_credentials&scope=read%00%0D%0A"), basic(stack.Service, stack.ServiceSecret)), expect{400, "invalid_scope", ""}},
		{"token: huge code_verifier", raw("POST", "/token", form, []byte("grant_type=authorization_code&code=x&redirect_uri=https%3A%2F%2Fapp.example%2Fcb&code_verifier="+strings.Repeat("v", 60<<10)), web), expect{400, "invalid_request", ""}},

		// Revocation, introspection, userinfo.
		{"revoke: body over 64 KiB", raw("POST", "/revoke", form, []byte("token="+strings.Repeat("t", 70<<10)), web), expect{413, "invalid_request", ""}},
		{"revoke: repeated token", raw("POST", "/revoke", form, []byte("token=a&token=b"), web), expect{400, "invalid_request", ""}},
		{"introspect: malformed form", raw("POST", "/introspect", form, []byte("token=%"), basic(stack.Service, stack.ServiceSecret)), expect{400, "invalid_request", ""}},
		{"userinfo: bearer token of 48 KiB", raw("GET", "/userinfo", "", nil, map[string]string{"Authorization": "Bearer " + strings.Repeat("x", 48<<10)}), expect{401, "invalid_token", ""}},
		{"userinfo: bearer token with invalid UTF-8", raw("GET", "/userinfo", "", nil, map[string]string{"Authorization": "Bearer \xff\xfe"}), expect{401, "invalid_token", ""}},

		// Dynamic client registration.
		{"register: body over 64 KiB", raw("POST", "/register", "application/json", jsonBody(map[string]any{"client_name": "x", "pad": strings.Repeat("p", 70<<10)}), nil), expect{413, "invalid_request", ""}},
		{"register: truncated JSON", raw("POST", "/register", "application/json", []byte(`{"redirect_uris": ["https://a.example/cb"`), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: JSON array", raw("POST", "/register", "application/json", []byte(`[{"redirect_uris": ["https://a.example/cb"]}]`), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: deeply nested JSON", raw("POST", "/register", "application/json", []byte(`{"x":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+`}`), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: wrong types", raw("POST", "/register", "application/json", []byte(`{"redirect_uris": "https://a.example/cb", "client_name": 7}`), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: form instead of JSON", raw("POST", "/register", form, []byte("redirect_uris=https://a.example/cb"), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: a thousand redirect URIs", raw("POST", "/register", "application/json", jsonBody(map[string]any{"redirect_uris": many(1000, func(i int) string { return "https://a.example/cb" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) })}), nil), expect{400, "invalid_redirect_uri", ""}},
		{"register: 10000-character name", raw("POST", "/register", "application/json", jsonBody(map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "client_name": strings.Repeat("Claude ", 1500)}), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: name with invalid UTF-8", raw("POST", "/register", "application/json", []byte("{\"redirect_uris\":[\"https://a.example/cb\"],\"client_name\":\"Cl\xffaude\"}"), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: name with bidi override", raw("POST", "/register", "application/json", jsonBody(map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "client_name": "Claude\u202e"}), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: redirect URI with user info", raw("POST", "/register", "application/json", jsonBody(map[string]any{"redirect_uris": []string{"https://claude.ai@evil.example/cb"}}), nil), expect{400, "invalid_redirect_uri", ""}},
		{"register: redirect URI of 5000 characters", raw("POST", "/register", "application/json", jsonBody(map[string]any{"redirect_uris": []string{"https://a.example/" + strings.Repeat("p", 5000)}}), nil), expect{400, "invalid_redirect_uri", ""}},
		{"register: unknown grant type", raw("POST", "/register", "application/json", jsonBody(map[string]any{"redirect_uris": []string{"https://a.example/cb"}, "grant_types": []string{"password"}}), nil), expect{400, "invalid_client_metadata", ""}},
		{"register: GET", raw("GET", "/register", "", nil, nil), expect{405, "invalid_request", ""}},

		// The authorization endpoint never sends anyone to an address it has not verified.
		{"authorize: redirect_uri repeated", raw("GET", authorize("&redirect_uri="+url.QueryEscape("https://app.example/cb")+"&redirect_uri="+url.QueryEscape("https://evil.example/cb")), "", nil, nil), expect{400, "", ""}},
		{"authorize: redirect_uri with invalid UTF-8", raw("GET", authorize("&redirect_uri=https%3A%2F%2Fapp.example%2Fcb%FF"), "", nil, nil), expect{400, "", ""}},
		{"authorize: malformed query", raw("GET", "/authorize?client_id=web&redirect_uri=%zz", "", nil, nil), expect{400, "", ""}},
		{"authorize: client_id with invalid UTF-8", raw("GET", "/authorize?response_type=code&client_id=%FF&redirect_uri="+url.QueryEscape("https://app.example/cb"), "", nil, nil), expect{400, "", ""}},
		{"authorize: registered redirect, repeated scope", raw("GET", authorize("&redirect_uri="+url.QueryEscape("https://app.example/cb")+"&scope=read&scope=write"), "", nil, nil), expect{302, "", "https://app.example/cb?"}},
		{"authorize: registered redirect, state of 8 KiB", raw("GET", authorize("&redirect_uri="+url.QueryEscape("https://app.example/cb")+"&code_challenge_method=plain&state="+strings.Repeat("s", 8<<10)), "", nil, nil), expect{302, "", "https://app.example/cb?"}},

		// Pages.
		{"sign-in: malformed form", raw("POST", "/sign-in", form, []byte("username=%zz&password=%"), map[string]string{"Origin": s.Front.URL}), expect{400, "", ""}},
		{"sign-in: body of 1 MiB", raw("POST", "/sign-in", form, []byte("username=a&password="+strings.Repeat("p", 1<<20)), map[string]string{"Origin": s.Front.URL}), expect{413, "", ""}},
		{"link page: unknown code of 4 KiB", raw("GET", "/account/services/link/"+strings.Repeat("A", 4<<10), "", nil, nil), expect{404, "", ""}},
		{"link page: code with invalid UTF-8", raw("GET", "/account/services/link/%FF%FE%00", "", nil, nil), expect{404, "", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.req.Header.Get("Origin") == "" && c.req.Method == http.MethodPost && strings.Contains(c.req.URL.Path, "sign-in") {
				c.req.Header.Set("Origin", s.Front.URL)
			}
			resp, err := b.C.Do(c.req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				t.Fatalf("%d %s: a client's mistake is never a server error", resp.StatusCode, trim(body))
			}
			if resp.StatusCode != c.want.status {
				t.Errorf("status %d %s, want %d", resp.StatusCode, trim(body), c.want.status)
			}
			ct := resp.Header.Get("Content-Type")
			if c.want.json != "" {
				var e struct {
					Error string `json:"error"`
				}
				if !strings.HasPrefix(ct, "application/json") || json.Unmarshal(body, &e) != nil || e.Error != c.want.json {
					t.Errorf("%s %s: want a JSON error %q", ct, trim(body), c.want.json)
				}
				if resp.Header.Get("Cache-Control") != "no-store" {
					t.Errorf("an error from an OAuth endpoint without Cache-Control: no-store")
				}
			} else if c.want.status != http.StatusFound && !strings.HasPrefix(ct, "text/html") {
				t.Errorf("%s %s: want an HTML page", ct, trim(body))
			}
			loc := resp.Header.Get("Location")
			switch {
			case c.want.location == "" && loc != "":
				t.Errorf("redirected to %q", loc)
			case c.want.location != "" && !strings.HasPrefix(loc, c.want.location):
				t.Errorf("redirected to %q, want only %s…", loc, c.want.location)
			}
		})
	}

	// Nothing a bad request sent was stored.
	clients, err := s.Admin.ListClients(t.Context(), stack.ProjectKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(clients) != 0 {
		t.Errorf("%d clients registered by bad requests", len(clients))
	}
}

func trim(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
