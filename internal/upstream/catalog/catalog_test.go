package catalog

import (
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCatalogLoads: every file parses strictly (an unknown key is a typo, not a silent
// default), passes validate, and the presets the docs promise are there.
func TestCatalogLoads(t *testing.T) {
	if _, err := load(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"github", "gitlab", "google", "slack", "notion", "linear", "atlassian", "microsoft"} {
		if !slices.Contains(Names(), want) {
			t.Errorf("catalog has no %s preset; have %v", want, Names())
		}
	}
	for _, n := range Names() {
		p, _ := Get(n)
		if len(p.Docs) == 0 {
			t.Errorf("%s: no documentation URLs", n)
		}
	}
}

func TestGitHubPresetIsWhatItWas(t *testing.T) {
	p, ok := Get("github")
	if !ok {
		t.Fatal("no github preset")
	}
	if p.AuthorizationURL != "https://github.com/login/oauth/authorize" || p.TokenURL != "https://github.com/login/oauth/access_token" ||
		p.UserInfoURL != "https://api.github.com/user" || p.RevocationURL != "" || p.Account.NameField != "login" || p.RevocationStyle != "GitHubGrant" {
		t.Errorf("github preset = %+v", *p)
	}
}

func TestMicrosoftNeedsTenant(t *testing.T) {
	for _, n := range Names() {
		p, _ := Get(n)
		if got, want := p.NeedsTenant(), n == "microsoft"; got != want {
			t.Errorf("%s: NeedsTenant = %v", n, got)
		}
	}
}

// TestBaseURLPresets: the presets for servers of your own take {baseURL}; gitlab and
// salesforce default to their public service, github-enterprise-server and zendesk (one
// account's subdomain) have no default.
func TestBaseURLPresets(t *testing.T) {
	want := map[string]string{"gitlab": "https://gitlab.com", "salesforce": "https://login.salesforce.com", "github-enterprise-server": "", "zendesk": ""}
	for n, def := range want {
		if !slices.Contains(NamesTakingBaseURL(), n) {
			t.Errorf("%s does not take a base URL", n)
		}
		if p, _ := Get(n); p.BaseURL != def {
			t.Errorf("%s: default base URL %q, want %q", n, p.BaseURL, def)
		}
	}
}

// TestValidateRefuses: a preset file cannot do what a Connector's CRD validation forbids.
func TestValidateRefuses(t *testing.T) {
	ok := func() Preset {
		return Preset{Name: "x", DisplayName: "X", Connects: "x", Docs: []string{"https://x.example/docs"},
			AuthorizationURL: "https://x.example/a", TokenURL: "https://x.example/t", UserInfoURL: "https://x.example/u"}
	}
	tests := []struct {
		name   string
		change func(*Preset)
		want   string
	}{
		{"no docs", func(p *Preset) { p.Docs = nil }, "docs"},
		{"http endpoint", func(p *Preset) { p.TokenURL = "http://x.example/t" }, "https"},
		{"client id outside revocation", func(p *Preset) { p.TokenURL = "https://x.example/{client_id}/t" }, "revocation URL"},
		{"Authorization header", func(p *Preset) { p.Headers = map[string]string{"Authorization": "Bearer x"} }, "cannot be set"},
		{"reserved auth param", func(p *Preset) { p.AuthParams = map[string]string{"redirect_uri": "https://evil.example"} }, "authParams"},
		{"auth param on the scope parameter", func(p *Preset) {
			p.ScopeParameter = "user_scope"
			p.AuthParams = map[string]string{"user_scope": "admin"}
		}, "authParams"},
		{"unknown auth method", func(p *Preset) { p.TokenEndpointAuthMethod = "private_key_jwt" }, "tokenEndpointAuthMethod"},
		{"body and query", func(p *Preset) { p.UserInfo = UserInfo{Body: "{}", GraphQLQuery: "{ a }"} }, "not both"},
		{"base URL inside a host's path", func(p *Preset) { p.TokenURL = "https://x.example/{baseURL}/t" }, "only start"},
		{"base URL without its path", func(p *Preset) { p.TokenURL = "{baseURL}" }, "only start"},
		{"a default base URL nothing uses", func(p *Preset) { p.BaseURL = "https://x.example" }, "no endpoint"},
		{"a default base URL with a query", func(p *Preset) {
			p.TokenURL, p.BaseURL = "{baseURL}/t", "https://x.example?a=b"
		}, "clean"},
		{"reserved select-account param", func(p *Preset) {
			p.SelectAccount.Params = map[string]string{"state": "x"}
		}, "selectAccount.params"},
		{"hint on a reserved parameter", func(p *Preset) { p.SelectAccount.HintParameter = "redirect_uri" }, "hintParameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ok()
			if err := p.validate(); err != nil {
				t.Fatalf("the base preset is refused: %v", err)
			}
			tt.change(&p)
			if err := p.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("validate = %v, want an error about %s", err, tt.want)
			}
		})
	}
}

// TestPresetsListedWhereAdminsLook: `kubectl explain connector.spec.preset` (the CRD's field
// description) and the provider catalog page name every preset, and each preset has its own
// page, so a provider added as a data file cannot stay invisible to the people choosing one.
// (The chart README's list is generated from the files by hack/tools/chartdocs.)
func TestPresetsListedWhereAdminsLook(t *testing.T) {
	crd, err := os.ReadFile("../../../config/crd/bases/latchkey.dev_connectors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties map[string]struct {
									Description string `json:"description"`
								} `json:"properties"`
							} `json:"spec"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(crd, &doc); err != nil || len(doc.Spec.Versions) == 0 {
		t.Fatalf("reading the Connector CRD: %v", err)
	}
	explain := doc.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties["preset"].Description
	catalogPage, err := os.ReadFile("../../../docs/providers/README.md")
	if err != nil {
		t.Fatal(err)
	}
	words := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') })
	}
	for _, n := range Names() {
		if !slices.Contains(words(explain), n) {
			t.Errorf("the Connector CRD's spec.preset description does not name %q (api/v1alpha1 ConnectorSpec.Preset, then make manifests)", n)
		}
		if !strings.Contains(string(catalogPage), "`"+n+"`") {
			t.Errorf("docs/providers/README.md does not list %q", n)
		}
		if _, err := os.Stat("../../../docs/providers/" + n + ".md"); err != nil {
			t.Errorf("no page docs/providers/%s.md", n)
		}
	}
}
