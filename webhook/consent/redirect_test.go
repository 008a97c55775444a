package consent

import "testing"

func TestMatchRedirect(t *testing.T) {
	reg := []string{"https://app.example/cb", "http://127.0.0.1/callback", "http://[::1]:8080/cb?x=1", "com.example.app:/cb"}
	for _, c := range []struct {
		uri string
		ok  bool
	}{
		{"https://app.example/cb", true},
		{"com.example.app:/cb", true},
		{"http://127.0.0.1/callback", true},
		{"http://127.0.0.1:49152/callback", true},
		{"http://[::1]:1/cb?x=1", true},
		{"http://[::1]/cb?x=1", true},
		{"https://app.example/cb/", false},
		{"https://app.example/cb?x", false},
		{"https://app.example:443/cb", false},
		{"https://APP.example/cb", false},
		{"http://127.0.0.1:49152/callback/", false},
		{"http://127.0.0.1:49152/callback?x=1", false},
		{"http://127.0.0.1:49152/callback#f", false},
		{"http://u@127.0.0.1:49152/callback", false},
		{"http://127.0.0.2:49152/callback", false},
		{"http://localhost:49152/callback", false},
		{"https://127.0.0.1:49152/callback", false},
		{"http://127.0.0.1:49152/Callback", false},
		{"http://127.0.0.1:49152/%63allback", false},
		{"http://[::1]:1/cb?x=2", false},
		{"http://127.0.0.1:abc/callback", false},
		{"com.example.app:/cb2", false},
	} {
		if got := MatchRedirect(reg, c.uri); got != c.ok {
			t.Errorf("MatchRedirect(%q) = %v", c.uri, got)
		}
	}
}

func TestFormSource(t *testing.T) {
	for in, want := range map[string]string{
		"https://app.example/cb?x=1":       "https://app.example",
		"http://127.0.0.1:5000/cb":         "http://127.0.0.1:5000",
		"http://[::1]:5000/cb":             "http:",
		"com.example.app:/cb":              "com.example.app:",
		"https://a.example;script-src *":   "",
		"https://a.example/x'; img-src *'": "https://a.example",
	} {
		if got := formSource(in); got != want && !(want == "" && got == "") {
			t.Errorf("formSource(%q) = %q, want %q", in, got, want)
		}
	}
}
