// Package catalog is Latchkey's catalog of Connector presets: one YAML file per service in
// presets/, compiled in. A preset is data — endpoints, the service's dialect, the account
// fields and the documentation pages the values were taken from — so adding a service is adding
// a file, and the Connector CRD names a preset by a free string that the controller checks
// here (docs/decisions/0056, docs/providers/README.md).
package catalog

import (
	"embed"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

//go:embed presets/*.yaml
var files embed.FS

// Preset is one service. Field names follow the Connector's spec; every field is optional
// except the endpoints a connection needs and Docs.
type Preset struct {
	// Name is the file's name without .yaml: what spec.preset says, and the default audience.
	Name string `json:"-"`
	// DisplayName is the service's name on the account page ("GitHub").
	DisplayName string `json:"displayName"`
	// Connects says in a few words what a connection reaches, for docs/providers/README.md.
	Connects string `json:"connects"`
	// Docs are the documentation pages the values below were taken from.
	Docs []string `json:"docs"`

	AuthorizationURL string `json:"authorizationURL"`
	TokenURL         string `json:"tokenURL"`
	UserInfoURL      string `json:"userInfoURL,omitempty"`
	RevocationURL    string `json:"revocationURL,omitempty"`
	OIDCIssuer       string `json:"oidcIssuer,omitempty"`
	// RefreshURL is where refresh requests go when not to TokenURL (Figma).
	RefreshURL string `json:"refreshURL,omitempty"`
	// TenantClaim is the ID token claim naming the tenant, for issuers templated by tenant.
	TenantClaim string `json:"tenantClaim,omitempty"`

	TokenEndpointAuthMethod string            `json:"tokenEndpointAuthMethod,omitempty"`
	TokenRequestFormat      string            `json:"tokenRequestFormat,omitempty"`
	AccessTokenField        string            `json:"accessTokenField,omitempty"`
	ScopeSeparator          string            `json:"scopeSeparator,omitempty"`
	ScopeParameter          string            `json:"scopeParameter,omitempty"`
	DefaultScopes           []string          `json:"defaultScopes,omitempty"`
	AuthParams              map[string]string `json:"authParams,omitempty"`
	UserInfo                UserInfo          `json:"userInfo,omitempty"`
	Headers                 map[string]string `json:"headers,omitempty"`
	Account                 Account           `json:"account,omitempty"`
	RevocationStyle         string            `json:"revocationStyle,omitempty"`

	// BaseURL is what {baseURL} in the endpoints stands for when the Connector's spec.baseURL
	// is unset (https://gitlab.com); a preset whose endpoints contain {baseURL} without one
	// needs spec.baseURL (a GitHub Enterprise Server's address).
	BaseURL string `json:"baseURL,omitempty"`
	// SelectAccount is how the service's authorization page is asked to let the person pick
	// another account than the one signed in there, when they connect a further account
	// (docs/several-accounts.md). Empty: the service has no such request, and reuses the
	// account signed in there.
	SelectAccount SelectAccount `json:"selectAccount,omitempty"`
	// API is where the token proxy forwards the service's API calls, and the rules it proposes
	// (docs/token-proxy.md): a Connector's spec.proxy turns the proxy on and may replace both.
	API API `json:"api,omitempty"`
}

// API is a service's API as the token proxy reaches it.
type API struct {
	// BaseURL is the API's address (https://api.github.com), which may start with {baseURL}.
	BaseURL string `json:"baseURL,omitempty"`
	// Allow are the calls the preset proposes to forward when the Connector's spec.proxy names
	// none: read-only ones, as a start.
	Allow []ProxyRule `json:"allow,omitempty"`
}

// ProxyRule admits calls with one of Methods to PathPrefix or below.
type ProxyRule struct {
	Methods    []string `json:"methods"`
	PathPrefix string   `json:"pathPrefix"`
}

// SelectAccount is a service's way of letting the person choose another account.
type SelectAccount struct {
	// Params are added to the authorization request ("prompt": "select_account"); a prompt
	// joins any prompt of authParams, space-separated as OpenID Connect spells several.
	Params map[string]string `json:"params,omitempty"`
	// HintParameter names the authorization request parameter that suggests which account to
	// sign in with ("login" at GitHub, "login_hint" in OpenID Connect); it carries the account
	// the agent named.
	HintParameter string `json:"hintParameter,omitempty"`
}

// UserInfo is how the user info endpoint is asked.
type UserInfo struct {
	Method       string `json:"method,omitempty"`
	Body         string `json:"body,omitempty"`
	GraphQLQuery string `json:"graphQLQuery,omitempty"`
}

// Account names the user info fields (dotted paths) of the account's id and name.
type Account struct {
	IDField   string `json:"idField,omitempty"`
	NameField string `json:"nameField,omitempty"`
}

// Placeholders a preset's URLs may contain, filled from the Connector's spec.
const (
	// Tenant is filled from spec.tenant.
	Tenant = "{tenant}"
	// ClientID is filled with the client id, in the revocation URL only.
	ClientID = "{client_id}"
	// BaseURL is filled from spec.baseURL, or the preset's BaseURL; it may only start an
	// endpoint.
	BaseURL = "{baseURL}"
)

func (p *Preset) endpoints() []string {
	return []string{p.AuthorizationURL, p.TokenURL, p.UserInfoURL, p.RevocationURL, p.OIDCIssuer, p.RefreshURL, p.API.BaseURL}
}

// TakesBaseURL reports whether the preset's endpoints contain {baseURL}.
func (p *Preset) TakesBaseURL() bool {
	for _, u := range p.endpoints() {
		if strings.Contains(u, BaseURL) {
			return true
		}
	}
	return false
}

// CleanBaseURL checks a base URL given for {baseURL} and returns it without a trailing slash:
// https, a host, at most a path of plain segments (a GitLab under https://example.com/gitlab),
// and nothing that could move an endpoint elsewhere once the preset's path is appended: no
// user info, query, fragment, percent-encoding, backslash, or "." or ".." segment.
func CleanBaseURL(s string) (string, error) {
	if s == "" || len(s) > 256 || strings.ContainsAny(s, "?#%\\@ \t\r\n") {
		return "", fmt.Errorf("%q is not an https URL of a host and a plain path", s)
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Hostname() == "" || u.User != nil || u.Opaque != "" {
		return "", fmt.Errorf("%q is not an https URL of a host and a plain path", s)
	}
	p := strings.TrimSuffix(u.Path, "/")
	if p != "" && !baseURLPathRE.MatchString(p) {
		return "", fmt.Errorf("%q: the path may only be plain segments, as in https://example.com/gitlab", s)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("%q: the path may not contain a . or .. segment", s)
		}
	}
	return "https://" + u.Host + p, nil
}

var baseURLPathRE = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+$`)

// NeedsTenant reports whether the preset's endpoints contain {tenant}.
func (p *Preset) NeedsTenant() bool {
	for _, u := range p.endpoints() {
		if strings.Contains(u, Tenant) {
			return true
		}
	}
	return false
}

var load = sync.OnceValues(func() (map[string]*Preset, error) {
	out := map[string]*Preset{}
	entries, err := fs.Glob(files, "presets/*.yaml")
	if err != nil {
		return nil, err
	}
	for _, f := range entries {
		b, err := files.ReadFile(f)
		if err != nil {
			return nil, err
		}
		p := &Preset{}
		if err := yaml.UnmarshalStrict(b, p); err != nil {
			return nil, fmt.Errorf("catalog: %s: %w", f, err)
		}
		p.Name = strings.TrimSuffix(path.Base(f), ".yaml")
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("catalog: %s: %w", f, err)
		}
		out[p.Name] = p
	}
	return out, nil
})

// all is the catalog; a broken file is a build mistake the tests catch, so it panics.
func all() map[string]*Preset {
	m, err := load()
	if err != nil {
		panic(err)
	}
	return m
}

// Get returns the preset called name, or false. The Preset is shared: do not change it.
func Get(name string) (*Preset, bool) {
	p, ok := all()[name]
	return p, ok
}

// Names lists the catalog's presets, sorted.
func Names() []string {
	m := all()
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// NamesTakingBaseURL lists the presets whose endpoints start with {baseURL}, sorted.
func NamesTakingBaseURL() []string {
	var out []string
	for _, n := range Names() {
		if all()[n].TakesBaseURL() {
			out = append(out, n)
		}
	}
	return out
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	fieldRE  = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
	headerRE = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// validate holds a preset to what the CRD's validation holds a Connector to, and a little more:
// https endpoints, documentation for every value.
func (p *Preset) validate() error {
	if !nameRE.MatchString(p.Name) || len(p.Name) > 63 {
		return fmt.Errorf("name %q is not a valid preset name", p.Name)
	}
	if p.DisplayName == "" || p.Connects == "" || len(p.Docs) == 0 {
		return fmt.Errorf("displayName, connects and docs are required")
	}
	for _, d := range p.Docs {
		if u, err := url.Parse(d); err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("docs: %q is not an https URL", d)
		}
	}
	if p.AuthorizationURL == "" || p.TokenURL == "" || (p.UserInfoURL == "" && p.OIDCIssuer == "") {
		return fmt.Errorf("authorizationURL, tokenURL and userInfoURL or oidcIssuer are required")
	}
	if err := p.validateEndpoints(); err != nil {
		return err
	}
	if err := p.validateAPI(); err != nil {
		return err
	}
	return p.validateDialect()
}

// proxyMethods are the methods a proxy rule may name, as the Connector CRD's ProxyMethod.
var proxyMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}

// validateAPI: proposed rules need an API address, name known methods, and have clean prefixes.
func (p *Preset) validateAPI() error {
	if len(p.API.Allow) > 0 && p.API.BaseURL == "" {
		return fmt.Errorf("api.allow needs api.baseURL")
	}
	for _, r := range p.API.Allow {
		if len(r.Methods) == 0 {
			return fmt.Errorf("api.allow: a rule names no method")
		}
		for _, m := range r.Methods {
			if !slices.Contains(proxyMethods, m) {
				return fmt.Errorf("api.allow: method %q is not one of %q", m, proxyMethods)
			}
		}
		if err := CheckPathPrefix(r.PathPrefix); err != nil {
			return fmt.Errorf("api.allow: %w", err)
		}
	}
	return nil
}

// pathPrefixRE is the Connector CRD's pattern for spec.proxy.allow[].pathPrefix.
var pathPrefixRE = regexp.MustCompile(`^/[A-Za-z0-9._~!$&'()*+,;=:@/-]*$`)

// CheckPathPrefix refuses a proxy rule's path prefix that could mean another path than the one
// written: not starting with "/", percent-encoding, a query, "//", or a "." or ".." segment.
func CheckPathPrefix(s string) error {
	if len(s) > 256 || !pathPrefixRE.MatchString(s) {
		return fmt.Errorf("path prefix %q must start with / and hold only unreserved path characters", s)
	}
	if strings.Contains(s, "//") {
		return fmt.Errorf("path prefix %q must not hold //", s)
	}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("path prefix %q must not hold . or .. segments", s)
		}
	}
	return nil
}

// validateEndpoints: every endpoint is https once its placeholders are filled, and
// {client_id} is filled only in the revocation URL.
func (p *Preset) validateEndpoints() error {
	if p.BaseURL != "" {
		if !p.TakesBaseURL() {
			return fmt.Errorf("baseURL is set but no endpoint contains %s", BaseURL)
		}
		if clean, err := CleanBaseURL(p.BaseURL); err != nil || clean != p.BaseURL {
			return fmt.Errorf("baseURL %q is not a clean https base URL", p.BaseURL)
		}
	}
	for _, e := range p.endpoints() {
		if e == "" {
			continue
		}
		if strings.Contains(e, BaseURL) && !strings.HasPrefix(e, BaseURL+"/") {
			return fmt.Errorf("endpoint %q: %s may only start an endpoint, followed by its path", e, BaseURL)
		}
		filled := strings.NewReplacer(Tenant, "tenant", ClientID, "client", BaseURL, "https://base.example").Replace(e)
		if u, err := url.Parse(filled); err != nil || u.Scheme != "https" || u.Host == "" || u.Fragment != "" {
			return fmt.Errorf("endpoint %q is not an https URL", e)
		}
		if strings.Contains(e, ClientID) && e != p.RevocationURL {
			return fmt.Errorf("endpoint %q: %s is only filled in the revocation URL", e, ClientID)
		}
	}
	return nil
}

// validateDialect holds the dialect fields to the values the Connector CRD accepts.
func (p *Preset) validateDialect() error {
	checks := []struct {
		field, value string
		allowed      []string
	}{
		{"tokenEndpointAuthMethod", p.TokenEndpointAuthMethod, []string{"", "client_secret_basic", "client_secret_post", "none"}},
		{"tokenRequestFormat", p.TokenRequestFormat, []string{"", "form", "json"}},
		{"scopeSeparator", p.ScopeSeparator, []string{"", "space", "comma"}},
		{"revocationStyle", p.RevocationStyle, []string{"", "RFC7009", "GitHubGrant", "Bearer"}},
		{"userInfo.method", p.UserInfo.Method, []string{"", "GET", "POST"}},
	}
	for _, c := range checks {
		if !slices.Contains(c.allowed, c.value) {
			return fmt.Errorf("%s %q is not one of %q", c.field, c.value, c.allowed[1:])
		}
	}
	for _, f := range []string{p.AccessTokenField, p.Account.IDField, p.Account.NameField, p.ScopeParameter, p.TenantClaim} {
		if f != "" && !fieldRE.MatchString(f) {
			return fmt.Errorf("field %q is not a dotted path", f)
		}
	}
	if p.UserInfo.Body != "" && p.UserInfo.GraphQLQuery != "" {
		return fmt.Errorf("userInfo: body or graphQLQuery, not both")
	}
	for k := range p.Headers {
		if !headerRE.MatchString(k) || ForbiddenHeader(k) {
			return fmt.Errorf("header %q cannot be set", k)
		}
	}
	for k := range p.AuthParams {
		if ReservedAuthParam(k) || k == p.ScopeParameter {
			return fmt.Errorf("authParams cannot set %q", k)
		}
	}
	for k := range p.SelectAccount.Params {
		if ReservedAuthParam(k) || k == p.ScopeParameter {
			return fmt.Errorf("selectAccount.params cannot set %q", k)
		}
	}
	if h := p.SelectAccount.HintParameter; h != "" && (ReservedAuthParam(h) || h == p.ScopeParameter) {
		return fmt.Errorf("selectAccount.hintParameter cannot be %q", h)
	}
	return nil
}

// ForbiddenHeader reports whether a header is one Latchkey or HTTP owns; the Connector CRD
// refuses the same list.
func ForbiddenHeader(k string) bool {
	switch strings.ToLower(k) {
	case "authorization", "content-type", "content-length", "cookie", "host", "connection",
		"transfer-encoding", "te", "upgrade", "proxy-authorization", "traceparent", "tracestate":
		return true
	}
	return false
}

// ReservedAuthParam reports whether an authorization parameter is one Latchkey sets.
func ReservedAuthParam(k string) bool {
	switch k {
	case "response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method":
		return true
	}
	return false
}
