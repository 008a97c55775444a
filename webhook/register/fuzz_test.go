package register

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"latchkey.dev/latchkey/webhook/oauth"
)

// FuzzRegistrationMetadata feeds arbitrary bodies through what /register does with them before
// anything is stored: read the JSON (bounded), normalise and validate. Whatever comes in, the
// answer is a client error in RFC 7591's shape or metadata that keeps every promise the consent
// page relies on.
//
//	go test -run '^$' -fuzz FuzzRegistrationMetadata ./webhook/register/
func FuzzRegistrationMetadata(f *testing.F) {
	for _, seed := range []string{
		`{"redirect_uris":["https://claude.ai/api/mcp/auth_callback"],"client_name":"Claude"}`,
		`{"redirect_uris":["http://127.0.0.1:33418/callback"],"token_endpoint_auth_method":"none"}`,
		`{"redirect_uris":["com.example.app:/cb"],"grant_types":["authorization_code","refresh_token"]}`,
		`{"grant_types":["client_credentials"],"token_endpoint_auth_method":"client_secret_post","scope":"read write"}`,
		`{"redirect_uris":["https://claude.ai@evil.example/cb"]}`,
		`{"redirect_uris":["https://a.example/cb#frag"],"client_name":"\u202eedualC"}`,
		`{"redirect_uris":"https://a.example/cb"}`,
		`{"redirect_uris":[null,1,{}]}`,
		"{\"client_name\":\"\xff\xfe\"}",
		`[]`, `{`, ``, `null`, `{"x":[[[[[[[[[[]]]]]]]]]]}`,
		`{"redirect_uris":["https://a.example/cb"],"contacts":["a@b","a@b"],"response_types":["code","code"]}`,
		`{"redirect_uris":["https://a.example/cb"],"client_uri":"javascript:alert(1)"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/team/demo/register", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		var m Metadata
		if err := readJSON(httptest.NewRecorder(), req, &m); err != nil {
			clientError(t, err, "invalid_client_metadata", "invalid_request")
			return
		}
		if err := m.Normalize(); err != nil {
			clientError(t, err, "invalid_client_metadata", "invalid_redirect_uri")
			return
		}
		accepted(t, m)

		// What is stored reads back the same: normalising again changes nothing, and the
		// stored JSON (RFC 7592 reads return it) goes through the same checks unchanged.
		again := m
		again.RedirectURIs = slices.Clone(m.RedirectURIs)
		if err := again.Normalize(); err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("normalising accepted metadata again: %v\n%+v\n%+v", err, m, again)
		}
		stored, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Metadata
		req = httptest.NewRequest(http.MethodPost, "/team/demo/register", bytes.NewReader(stored))
		req.Header.Set("Content-Type", "application/json")
		if err := readJSON(httptest.NewRecorder(), req, &back); err != nil {
			t.Fatalf("stored metadata does not read back: %v (%s)", err, stored)
		}
		if err := back.Normalize(); err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("stored metadata normalises differently: %v\n%+v\n%+v", err, m, back)
		}
	})
}

// clientError checks an error is one of the given RFC 7591 / RFC 6749 codes with a 4xx status
// and a short, printable description (it may quote the client's input, never all of it).
func clientError(t *testing.T, err error, codes ...string) {
	t.Helper()
	var e oauth.Error
	if !errors.As(err, &e) {
		t.Fatalf("not an oauth.Error: %T %v", err, err)
	}
	if !slices.Contains(codes, e.Code) || e.Status < 400 || e.Status > 499 {
		t.Fatalf("error %q status %d, want one of %v with a 4xx", e.Code, e.Status, codes)
	}
	if !utf8.ValidString(e.Description) || len(e.Description) > 400 {
		t.Fatalf("description is not short valid UTF-8: %q", e.Description)
	}
}

// accepted checks what the consent page and the token endpoint assume of stored metadata.
func accepted(t *testing.T, m Metadata) {
	t.Helper()
	if len(m.RedirectURIs) > maxRedirectURIs {
		t.Fatalf("%d redirect URIs accepted", len(m.RedirectURIs))
	}
	for _, u := range m.RedirectURIs {
		if err := ValidRedirectURI(u); err != nil {
			t.Fatalf("accepted redirect URI %q fails its own check: %v", u, err)
		}
		if strings.ContainsAny(u, "#@ \t\r\n\\") || !utf8.ValidString(u) {
			t.Fatalf("accepted redirect URI %q has a fragment, user info, space or odd byte", u)
		}
	}
	for _, g := range m.GrantTypes {
		if !slices.Contains(knownGrants, g) {
			t.Fatalf("unknown grant type %q accepted", g)
		}
	}
	for _, r := range m.ResponseTypes {
		if r != "code" {
			t.Fatalf("response type %q accepted", r)
		}
	}
	if slices.Contains(m.GrantTypes, "authorization_code") && len(m.RedirectURIs) == 0 {
		t.Fatal("authorization_code without a redirect URI accepted")
	}
	switch m.TokenEndpointAuthMethod {
	case "none", "client_secret_basic", "client_secret_post":
	default:
		t.Fatalf("auth method %q accepted", m.TokenEndpointAuthMethod)
	}
	for _, s := range append([]string{m.ClientName, m.SoftwareID, m.SoftwareVersion}, m.Contacts...) {
		if !utf8.ValidString(s) {
			t.Fatalf("invalid UTF-8 accepted: %q", s)
		}
		for _, r := range s {
			if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == utf8.RuneError {
				t.Fatalf("control or bidi character accepted in %q", s)
			}
		}
	}
	if utf8.RuneCountInString(m.ClientName) > maxNameLen {
		t.Fatalf("name of %d characters accepted", utf8.RuneCountInString(m.ClientName))
	}
	for _, u := range []string{m.ClientURI, m.LogoURI, m.TOSURI, m.PolicyURI} {
		if u != "" && !strings.HasPrefix(u, "https://") {
			t.Fatalf("non-https address %q accepted for the consent page", u)
		}
	}
}
