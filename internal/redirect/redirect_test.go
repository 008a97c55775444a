package redirect

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
)

var acme = config.NamedRedirect{Name: "Acme Desk", Pattern: "https://desk.acme.example/oauth/{tenant}/callback"}

func allRules() config.RedirectRules {
	r := config.DefaultRedirectRules()
	r.Named = []config.NamedRedirect{
		acme,
		{Name: "Acme Bot", Pattern: "https://bot.acme.example/cb"},
	}
	return r
}

func TestClassify(t *testing.T) {
	tests := []struct {
		uri  string
		kind Kind
		name string
	}{
		// The built-ins, exactly.
		{"https://claude.ai/api/mcp/auth_callback", Agent, "Claude"},
		{"https://claude.com/api/mcp/auth_callback", Agent, "Claude"},
		{"https://chatgpt.com/connector_platform_oauth_redirect", Agent, "ChatGPT"},
		{"https://chatgpt.com/connector/oauth/abc123", Agent, "ChatGPT"},
		{"https://chatgpt.com/connector/oauth/aB-_.~9", Agent, "ChatGPT"},
		{"https://desk.acme.example/oauth/t-42/callback", Agent, "Acme Desk"},
		{"https://bot.acme.example/cb", Agent, "Acme Bot"},

		// Look-alikes of Claude's callback.
		{"https://claude.ai@evil.example/api/mcp/auth_callback", Website, ""},
		{"https://evil.example@claude.ai/api/mcp/auth_callback", Website, ""},
		{"https://claude.ai:443/api/mcp/auth_callback", Website, ""},
		{"https://claude.ai:8443/api/mcp/auth_callback", Website, ""},
		{"https://claude.ai./api/mcp/auth_callback", Website, ""},
		{"HTTPS://CLAUDE.AI/API/MCP/AUTH_CALLBACK", Website, ""},
		{"HTTPS://claude.ai/api/mcp/auth_callback", Website, ""},
		{"https://CLAUDE.AI/api/mcp/auth_callback", Website, ""},
		{"https://Claude.ai/api/mcp/auth_callback", Website, ""},
		{"https://claude.ai/api/mcp/Auth_Callback", Website, ""},
		{"https://claude.ai/api/mcp/auth%5Fcallback", Website, ""},
		{"https://claude.ai/api%2Fmcp%2Fauth_callback", Website, ""},
		{"https://cl%61ude.ai/api/mcp/auth_callback", Website, ""},
		{"https://clаude.ai/api/mcp/auth_callback", Website, ""}, // Cyrillic а
		{"https://xn--clude-6ve.ai/api/mcp/auth_callback", Website, ""},
		{"https://claude.ai.evil.example/api/mcp/auth_callback", Website, ""},
		{"https://evil.example/https://claude.ai/api/mcp/auth_callback", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback/", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback?", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback?next=https://evil.example", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback#x", Website, ""},
		{"https://claude.ai/api/mcp/./auth_callback", Website, ""},
		{"https://claude.ai/api/mcp/../mcp/auth_callback", Website, ""},
		{"https://claude.ai//api/mcp/auth_callback", Website, ""},
		{"https://claude.ai\\@evil.example/api/mcp/auth_callback", Website, ""},
		{"https:\\\\claude.ai/api/mcp/auth_callback", Website, ""},
		{"https:/claude.ai/api/mcp/auth_callback", Website, ""},
		{"https:claude.ai/api/mcp/auth_callback", Website, ""},
		{"//claude.ai/api/mcp/auth_callback", Website, ""},
		{" https://claude.ai/api/mcp/auth_callback", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback ", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback\n", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback\x00", Website, ""},
		{"https://claude.ai\t/api/mcp/auth_callback", Website, ""},
		{"http://claude.ai/api/mcp/auth_callback", Website, ""},
		{"https://[::ffff:claude.ai]/api/mcp/auth_callback", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback;x", Website, ""},
		{"https://claude.ai/api/mcp/auth_callback\u200b", Website, ""},
		{"https://www.claude.ai/api/mcp/auth_callback", Website, ""},

		// Look-alikes of ChatGPT's callbacks.
		{"https://chatgpt.com/connector/oauth/", Website, ""},
		{"https://chatgpt.com/connector/oauth", Website, ""},
		{"https://chatgpt.com/connector/oauth/a/b", Website, ""},
		{"https://chatgpt.com/connector/oauth/abc/", Website, ""},
		{"https://chatgpt.com/connector/oauth/abc?x=1", Website, ""},
		{"https://chatgpt.com/connector/oauth/abc?", Website, ""},
		{"https://chatgpt.com/connector/oauth/a%2Fb", Website, ""},
		{"https://chatgpt.com/connector/oauth/a%3Fb", Website, ""},
		{"https://chatgpt.com/connector/oauth/..", Website, ""},
		{"https://chatgpt.com/connector/oauth/.", Website, ""},
		{"https://chatgpt.com/connector/oauth/a:b", Website, ""},
		{"https://chatgpt.com/connector/oauth/a@evil.example", Website, ""},
		{"https://chatgpt.com/connector/oauth/{callback_id}", Website, ""},
		{"https://chatgpt.com:443/connector/oauth/abc", Website, ""},
		{"https://chatgpt.com./connector/oauth/abc", Website, ""},
		{"https://chatgpt.com.evil.example/connector/oauth/abc", Website, ""},
		{"https://evil.example/connector/oauth/abc", Website, ""},
		{"https://chatgpt.com/connector_platform_oauth_redirect/", Website, ""},
		{"https://chatgpt.com/connector_platform_oauth_redirect?x", Website, ""},
		{"https://CHATGPT.com/connector_platform_oauth_redirect", Website, ""},
		{"https://chatgpt.com/connector/oauth/" + strings.Repeat("a", maxSegment+1), Website, ""},

		// Look-alikes of a named entry.
		{"https://desk.acme.example/oauth//callback", Website, ""},
		{"https://desk.acme.example/oauth/a/b/callback", Website, ""},
		{"https://desk.acme.example/oauth/t/callback/", Website, ""},
		{"https://desk.acme.example/oauth/t/callback?x=1", Website, ""},
		{"https://bot.acme.example/cb/", Website, ""},
		{"https://bot.acme.example/cb?x", Website, ""},

		// On the person's device.
		{"http://127.0.0.1/callback", Device, DeviceName},
		{"http://127.0.0.1:8080/callback", Device, DeviceName},
		{"http://127.1.2.3:65535/cb?x=1", Device, DeviceName},
		{"http://127.0.0.1", Device, DeviceName},
		{"http://[::1]:3000/cb", Device, DeviceName},
		{"http://[::1]/cb", Device, DeviceName},
		{"http://localhost/cb", Device, DeviceName},
		{"http://localhost:33418/", Device, DeviceName},
		{"https://localhost:8443/cb", Device, DeviceName},
		{"https://127.0.0.1/cb", Device, DeviceName},
		{"com.example.app:/oauth2redirect", Device, DeviceName},
		{"com.example.app:/oauth2redirect/example-provider", Device, DeviceName},
		{"com.example.app://callback", Device, DeviceName},
		{"io.github.someone.tool:cb", Device, DeviceName},

		// Look-alikes of the device.
		{"http://localhost.evil.example/cb", Website, ""},
		{"http://localhost./cb", Website, ""},
		{"http://LOCALHOST/cb", Website, ""},
		{"http://Localhost/cb", Website, ""},
		{"http://127.0.0.1.nip.io/cb", Website, ""},
		{"http://127.0.0.1.evil.example/cb", Website, ""},
		{"http://evil.example/127.0.0.1", Website, ""},
		{"http://127.0.0.1@evil.example/cb", Website, ""},
		{"http://evil.example@127.0.0.1/cb", Website, ""},
		{"http://user:pass@localhost/cb", Website, ""},
		{"http://0177.0.0.1/cb", Website, ""},
		{"http://0x7f.0.0.1/cb", Website, ""},
		{"http://0x7f000001/cb", Website, ""},
		{"http://2130706433/cb", Website, ""},
		{"http://127.1/cb", Website, ""},
		{"http://127.000.000.001/cb", Website, ""},
		{"http://[::ffff:127.0.0.1]/cb", Website, ""},
		{"http://[0:0:0:0:0:0:0:1]/cb", Website, ""},
		{"http://[::1%25eth0]/cb", Website, ""},
		{"http://[::1]x/cb", Website, ""},
		{"http://0.0.0.0/cb", Website, ""},
		{"http://128.0.0.1/cb", Website, ""},
		{"http://10.0.0.1/cb", Website, ""},
		{"http://127.0.0.1:0/cb", Website, ""},
		{"http://127.0.0.1:65536/cb", Website, ""},
		{"http://127.0.0.1:080/cb", Website, ""},
		{"http://127.0.0.1:/cb", Website, ""},
		{"http://127.0.0.1:+80/cb", Website, ""},
		{"http://127.0.0.1/cb#frag", Website, ""},
		{"http://127.0.0.1\\@evil.example/cb", Website, ""},
		{"http://127.0.0.1 /cb", Website, ""},
		{"HTTP://127.0.0.1/cb", Website, ""},
		{"http:127.0.0.1/cb", Website, ""},
		{"http:/127.0.0.1/cb", Website, ""},
		{"http:///127.0.0.1/cb", Website, ""},

		// Look-alikes of an app scheme, and schemes that are not apps.
		{"myapp:/cb", Website, ""},
		{"myapp://cb", Website, ""},
		{"javascript:alert(1)", Website, ""},
		{"data:text/html,hi", Website, ""},
		{"file:///etc/passwd", Website, ""},
		{"com.example.app:", Website, ""},
		{"com..app:/cb", Website, ""},
		{".com.app:/cb", Website, ""},
		{"com.app.:/cb", Website, ""},
		{"Com.Example.App:/cb", Website, ""},
		{"1com.example:/cb", Website, ""},
		{"com.example.app:/cb#frag", Website, ""},
		{"com.example.app://user@host/cb", Website, ""},
		{"com.example.app:/c b", Website, ""},

		// Ordinary and malformed websites.
		{"https://app.example/callback", Website, ""},
		{"https://app.example:8443/callback?x=1", Website, ""},
		{"", Website, ""},
		{"not a uri", Website, ""},
		{"/relative/cb", Website, ""},
		{"https://", Website, ""},
		{"https:///cb", Website, ""},
		{"https://app.example/%zz", Website, ""},
		{"https://app.example/" + strings.Repeat("a", MaxLength), Website, ""},
	}
	rules := allRules()
	for _, tt := range tests {
		t.Run(tt.uri, func(t *testing.T) {
			got := Classify(tt.uri, rules)
			if got.Kind != tt.kind || got.Name != tt.name || got.URI != tt.uri {
				t.Fatalf("Classify(%q) = %+v, want kind %q name %q", tt.uri, got, tt.kind, tt.name)
			}
		})
	}
}

func TestClassifySwitches(t *testing.T) {
	uris := map[string]string{
		"claude":   ClaudeAICallback,
		"chatgpt":  "https://chatgpt.com/connector/oauth/x1",
		"platform": ChatGPTPlatformCallback,
		"loopback": "http://127.0.0.1:9/cb",
		"local":    "http://localhost/cb",
		"app":      "com.example.app:/cb",
		"named":    "https://desk.acme.example/oauth/t/callback",
	}
	tests := []struct {
		name  string
		rules config.RedirectRules
		want  map[string]Kind
	}{
		{"everything off", config.RedirectRules{}, map[string]Kind{}},
		{"defaults", config.DefaultRedirectRules(), map[string]Kind{
			"claude": Agent, "chatgpt": Agent, "platform": Agent, "loopback": Device, "local": Device, "app": Device,
		}},
		{"claude only", config.RedirectRules{Claude: true}, map[string]Kind{"claude": Agent}},
		{"chatgpt only", config.RedirectRules{ChatGPT: true}, map[string]Kind{"chatgpt": Agent, "platform": Agent}},
		{"loopback only", config.RedirectRules{Loopback: true}, map[string]Kind{"loopback": Device, "local": Device}},
		{"apps only", config.RedirectRules{AppSchemes: true}, map[string]Kind{"app": Device}},
		{"named only", config.RedirectRules{Named: []config.NamedRedirect{acme}}, map[string]Kind{"named": Agent}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for key, uri := range uris {
				want, ok := tt.want[key]
				if !ok {
					want = Website
				}
				if got := Classify(uri, tt.rules).Kind; got != want {
					t.Errorf("%s: Classify(%q) = %q, want %q", key, uri, got, want)
				}
			}
		})
	}
}

func TestAllowed(t *testing.T) {
	rules := config.DefaultRedirectRules()
	tests := []struct {
		name    string
		uris    []string
		refused []string
	}{
		{"none", nil, nil},
		{"all recognised", []string{ClaudeAICallback, "http://127.0.0.1/cb", "com.example.app:/cb"}, nil},
		{"one honest one foreign", []string{ClaudeAICallback, "https://evil.example/cb"}, []string{"https://evil.example/cb"}},
		{"look-alike", []string{"https://claude.ai@evil.example/api/mcp/auth_callback"}, []string{"https://claude.ai@evil.example/api/mcp/auth_callback"}},
		{"all foreign", []string{"https://a.example/cb", "https://b.example/cb"}, []string{"https://a.example/cb", "https://b.example/cb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Allowed(tt.uris, rules)
			if strings.Join(got, "|") != strings.Join(tt.refused, "|") {
				t.Fatalf("Allowed = %q, want %q", got, tt.refused)
			}
		})
	}
}

func TestValidateRedirectURI(t *testing.T) {
	valid := []string{
		"https://app.example/cb",
		"https://app.example:8443/cb?x=1&y=2",
		"https://APP.example/cb",
		"https://192.0.2.1/cb",
		"https://[2001:db8::1]/cb",
		"https://app.example/a%20b",
		"http://127.0.0.1/cb",
		"http://127.255.255.254:1/cb",
		"http://[::1]:65535/cb",
		"http://localhost/cb",
		"com.example.app:/cb",
		"com.example.app://cb",
		"com.example.app:cb",
		ClaudeAICallback,
		"https://app.example/" + strings.Repeat("a", MaxLength-len("https://app.example/")),
	}
	for _, u := range valid {
		if err := ValidateRedirectURI(u); err != nil {
			t.Errorf("ValidateRedirectURI(%q) = %v, want nil", u, err)
		}
	}
	invalid := []string{
		"",
		"cb",
		"/cb",
		"//app.example/cb",
		":app.example/cb",
		"https://app.example/cb#",
		"https://app.example/cb#frag",
		"https://user@app.example/cb",
		"https://user:pw@app.example/cb",
		"https://:pw@app.example/cb",
		"https://app.example:0/cb",
		"https://app.example:99999/cb",
		"https://app.example:http/cb",
		"https://app.example:/cb",
		"https:///cb",
		"https:/app.example/cb",
		"https:app.example",
		"https://app.exa_mple/cb",
		"https://app%2eexample/cb",
		"https://[::1/cb",
		"https://[fe80::1%25en0]/cb",
		"https://[127.0.0.1]/cb",
		"HTTPS://app.example/cb",
		"Https://app.example/cb",
		"http://app.example/cb",
		"http://192.168.1.1/cb",
		"http://localhost.example/cb",
		"http://127.0.0.1.nip.io/cb",
		"ftp://app.example/cb",
		"javascript:alert(1)",
		"data:,x",
		"myapp:/cb",
		"com.example.app:",
		"com.example.app://",
		"com.example.app://@/cb",
		"https://app.example/c b",
		"https://app.example/c\tb",
		"https://app.example/c\\b",
		"https://app.example/c\"b",
		"https://app.example/c<b>",
		"https://app.example/c`b",
		"https://app.example/c{b}",
		"https://app.example/c|b",
		"https://app.example/c^b",
		"https://app.example/ü",
		"https://app.example/%",
		"https://app.example/%4",
		"https://app.example/%gg",
		"https://app.example/" + strings.Repeat("a", MaxLength),
	}
	for _, u := range invalid {
		if err := ValidateRedirectURI(u); err == nil {
			t.Errorf("ValidateRedirectURI(%q) = nil, want an error", u)
		}
	}
}

func TestMatchRegistered(t *testing.T) {
	registered := []string{
		"https://app.example/cb",
		"http://127.0.0.1/cb",
		"http://[::1]:8080/cb?x=1",
		"http://localhost:3000/cb",
		"com.example.app:/cb",
	}
	tests := []struct {
		presented string
		want      bool
	}{
		{"https://app.example/cb", true},
		{"https://app.example/cb/", false},
		{"https://app.example/CB", false},
		{"https://APP.example/cb", false},
		{"https://app.example:443/cb", false},
		{"https://app.example/cb?x=1", false},
		{"https://app.example/cb?", false},
		{"https://app.example/cb#x", false},
		{"https://app.example/%63b", false},
		{"https://app.example./cb", false},
		{"https://app.example/cb/../cb", false},
		{"https://app.example:8443/cb", false}, // ports vary for loopback http only

		// RFC 8252 §7.3: loopback IP literal over http, any port.
		{"http://127.0.0.1/cb", true},
		{"http://127.0.0.1:51234/cb", true},
		{"http://127.0.0.1:1/cb", true},
		{"http://127.0.0.1:51234/cb/", false},
		{"http://127.0.0.1:51234/cb?x", false},
		{"http://127.0.0.1:0/cb", false},
		{"http://127.0.0.1:65536/cb", false},
		{"http://127.0.0.1:/cb", false},
		{"http://127.0.0.2:51234/cb", false},
		{"http://127.0.0.1:51234@evil.example/cb", false},
		{"http://127.0.0.1:51234/cb#x", false},
		{"https://127.0.0.1:51234/cb", false},
		{"http://[::1]/cb?x=1", true},
		{"http://[::1]:9/cb?x=1", true},
		{"http://[::1]:9/cb", false},
		{"http://127.0.0.1:9/cb?x=1", false},

		// "localhost" is a name: exact only.
		{"http://localhost:3000/cb", true},
		{"http://localhost:3001/cb", false},
		{"http://localhost/cb", false},

		{"com.example.app:/cb", true},
		{"com.example.app:/cb/", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := MatchRegistered(registered, tt.presented); got != tt.want {
			t.Errorf("MatchRegistered(%q) = %v, want %v", tt.presented, got, tt.want)
		}
	}
	if MatchRegistered(nil, "http://127.0.0.1/cb") {
		t.Error("nothing registered must match nothing")
	}
	// A malformed registration gets no port leeway either.
	if MatchRegistered([]string{"http://127.0.0.1/c b"}, "http://127.0.0.1:80/c b") {
		t.Error("malformed registration matched with a different port")
	}
}

func TestValidatePattern(t *testing.T) {
	valid := []string{
		"https://app.example/cb",
		"https://app.example/oauth/{id}",
		"https://app.example/oauth/{id}/callback",
		"https://app.example/{id}",
		"com.example.app:/{id}",
		"http://127.0.0.1/{id}",
	}
	for _, p := range valid {
		if err := ValidatePattern(p); err != nil {
			t.Errorf("ValidatePattern(%q) = %v, want nil", p, err)
		}
	}
	invalid := []string{
		"https://app.example/oauth/{id}/{other}",
		"https://app.example/oauth/x{id}",
		"https://app.example/oauth/{id}x",
		"https://{tenant}.app.example/cb",
		"https://{tenant}/cb",
		"https://app.example/cb?x={id}",
		"https://app.example/cb#{id}",
		"https://app.example/{}",
		"https://app.example/{a b}",
		"https://app.example/{id",
		"https://app.example/id}",
		"http://app.example/{id}",
		"https://user@app.example/{id}",
	}
	for _, p := range invalid {
		if err := ValidatePattern(p); err == nil {
			t.Errorf("ValidatePattern(%q) = nil, want an error", p)
		}
		// An invalid pattern recognises nothing.
		if MatchPattern(p, strings.NewReplacer("{id}", "x", "{other}", "y", "{tenant}", "t").Replace(p)) {
			t.Errorf("invalid pattern %q matched", p)
		}
	}
}

// FuzzClassify checks the invariants the consent screen and the policy rely on, whatever the
// input: an agent is exactly one of the configured callbacks; a device is on the device; the
// URI comes back unchanged; nothing panics.
func FuzzClassify(f *testing.F) {
	seeds := []string{
		ClaudeAICallback, ClaudeComCallback, ChatGPTPlatformCallback,
		"https://chatgpt.com/connector/oauth/abc", "https://desk.acme.example/oauth/t/callback",
		"http://127.0.0.1:8080/cb", "http://[::1]/cb", "http://localhost/cb", "com.example.app:/cb",
		"https://claude.ai@evil.example/api/mcp/auth_callback", "http://localhost.evil.example/",
		"http://127.0.0.1.nip.io/", "https://clаude.ai/api/mcp/auth_callback", "https://claude.ai./x",
		"https://chatgpt.com/connector/oauth/a%2Fb", "com.example.app://h/cb", "", "https://",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	rules := allRules()
	exact := map[string]bool{ClaudeAICallback: true, ClaudeComCallback: true, ChatGPTPlatformCallback: true, "https://bot.acme.example/cb": true}
	patterns := []string{ChatGPTConnectorPattern, acme.Pattern}

	f.Fuzz(func(t *testing.T, uri string) {
		c := Classify(uri, rules)
		if c.URI != uri {
			t.Fatalf("URI changed: %q -> %q", uri, c.URI)
		}
		valid := ValidateRedirectURI(uri) == nil
		switch c.Kind {
		case Agent:
			if !valid {
				t.Fatalf("invalid URI %q classified as agent", uri)
			}
			if !exact[uri] && !matchesBySplit(patterns, uri) {
				t.Fatalf("%q classified as agent %q but is not a configured callback", uri, c.Name)
			}
		case Device:
			if !valid || c.Name != DeviceName {
				t.Fatalf("%q classified as device (valid=%v, name=%q)", uri, valid, c.Name)
			}
			if !onDevice(uri) {
				t.Fatalf("%q classified as device but is neither loopback nor a private-use scheme", uri)
			}
		case Website:
			if c.Name != "" {
				t.Fatalf("website %q has a name %q", uri, c.Name)
			}
		default:
			t.Fatalf("unknown kind %q", c.Kind)
		}
		// With everything switched off nothing is recognised.
		if k := Classify(uri, config.RedirectRules{}).Kind; k != Website {
			t.Fatalf("%q is %q with every rule off", uri, k)
		}
		// Exact matching always holds for a valid URI, and MatchRegistered never panics.
		if valid && !MatchRegistered([]string{uri}, uri) {
			t.Fatalf("%q does not match itself", uri)
		}
		if MatchRegistered([]string{ClaudeAICallback}, uri) && uri != ClaudeAICallback {
			t.Fatalf("%q matched Claude's callback", uri)
		}
		_ = Allowed([]string{uri}, rules)
	})
}

// matchesBySplit re-derives pattern matching independently: the URI must be the pattern with the
// placeholder replaced by one segment of unreserved characters.
func matchesBySplit(patterns []string, uri string) bool {
	for _, p := range patterns {
		i, j := strings.IndexByte(p, '{'), strings.IndexByte(p, '}')
		prefix, suffix := p[:i], p[j+1:]
		if !strings.HasPrefix(uri, prefix) || !strings.HasSuffix(uri, suffix) || len(uri) <= len(prefix)+len(suffix) {
			continue
		}
		seg := uri[len(prefix) : len(uri)-len(suffix)]
		if strings.Trim(seg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~") == "" && seg != "." && seg != ".." {
			return true
		}
	}
	return false
}

// onDevice re-derives "on the person's device" with net/url, independently of the parser above.
func onDevice(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil || u.User != nil || u.Fragment != "" {
		return false
	}
	switch u.Scheme {
	case "http", "https":
		h := u.Hostname()
		if h == "localhost" {
			return u.Host == "localhost" || strings.HasPrefix(u.Host, "localhost:")
		}
		a, err := netip.ParseAddr(h)
		return err == nil && a.IsLoopback() && !a.Is4In6()
	default:
		return strings.Contains(u.Scheme, ".") && strings.HasPrefix(uri, u.Scheme+":")
	}
}
