package proxy

import "testing"

// TestCleanPath: a path is forwarded as the service would read it, or refused; never cleaned.
func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"/user/repos":       "/user/repos",
		"/user/":            "/user/",
		"":                  "/",
		"/%75ser":           "/user",
		"/repos/a%20b":      "/repos/a b",
		"/search?q=x":       "/search?q=x", // the query is the caller's to cut; '?' is a plain byte here
		"/user/..":          "",
		"/user/%2E%2e/orgs": "",
		"/user%2Forgs":      "",
		"/user%5corgs":      "",
		"/a//b":             "",
		"/a/./b":            "",
		"/a/%0a":            "",
		"/a/%7f":            "",
		"/a/%zz":            "",
		"user":              "",
		"/a\\b":             "",
	} {
		got, err := cleanPath(in)
		if want == "" {
			if err == nil {
				t.Errorf("cleanPath(%q) = %q, want refused", in, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestUnder(t *testing.T) {
	for _, c := range []struct {
		path, prefix string
		want         bool
	}{
		{"/user", "/user", true},
		{"/user/repos", "/user", true},
		{"/users", "/user", false},
		{"/user", "/user/", false},
		{"/user/x", "/user/", true},
		{"/", "/", true},
		{"/anything", "/", true},
	} {
		if got := under(c.path, c.prefix); got != c.want {
			t.Errorf("under(%q, %q) = %v", c.path, c.prefix, got)
		}
	}
}
