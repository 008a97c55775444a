package register

import (
	"strings"
	"testing"
)

func TestValidRedirectURI(t *testing.T) {
	for _, c := range []struct {
		uri string
		ok  bool
	}{
		{"https://claude.ai/api/mcp/auth_callback", true},
		{"https://app.example/cb?x=1", true},
		{"http://127.0.0.1/callback", true},
		{"http://127.0.0.1:33418/callback", true},
		{"http://[::1]:8080/cb", true},
		{"http://localhost:6274/oauth/callback", true},
		{"com.example.app:/oauth2redirect", true},
		{"com.example.app:oauth2redirect", true},
		{"http://app.example/cb", false},
		{"http://localhost.evil.example/cb", false},
		{"http://127.0.0.1.evil.example/cb", false},
		{"https://app.example/cb#frag", false},
		{"https://app.example/cb#", false},
		{"https://user@app.example/cb", false},
		{"https:///cb", false},
		{"/cb", false},
		{"cb", false},
		{"javascript:alert(1)", false},
		{"data:text/html,x", false},
		{"file:///etc/passwd", false},
		{"myapp:/cb", false},
		{"com.example.app://host/cb", false},
		{"https://app.example/c b", false},
		{"https://app.example/\u00e9", false},
		{"https://app.example\\@evil.example/", false},
		{"https://" + strings.Repeat("a", 2000) + ".example/", false},
	} {
		err := ValidRedirectURI(c.uri)
		if (err == nil) != c.ok {
			t.Errorf("ValidRedirectURI(%q) = %v", c.uri, err)
		}
	}
}

func TestNormalizeDefaults(t *testing.T) {
	m := Metadata{RedirectURIs: []string{"https://a.example/cb", "https://a.example/cb"}}
	if err := m.Normalize(); err != nil {
		t.Fatal(err)
	}
	if m.TokenEndpointAuthMethod != "client_secret_basic" || len(m.GrantTypes) != 1 || m.GrantTypes[0] != "authorization_code" ||
		len(m.ResponseTypes) != 1 || len(m.RedirectURIs) != 1 {
		t.Errorf("%+v", m)
	}
	cc := Metadata{GrantTypes: []string{"client_credentials"}}
	if err := cc.Normalize(); err != nil || len(cc.ResponseTypes) != 0 {
		t.Errorf("client_credentials only: %+v %v", cc, err)
	}
}
