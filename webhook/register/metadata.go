package register

import (
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"latchkey.dev/latchkey/internal/redirect"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/site"
)

// Limits on registration metadata. Names and addresses are shown to people on the consent
// page; nothing a client sends may make that page unreadable.
const (
	maxRedirectURIs = 20
	maxURILen       = 2000
	maxNameLen      = 100 // characters
	maxContacts     = 10
	maxContactLen   = 320
	maxSoftwareLen  = 200
)

// Metadata is the client metadata Latchkey accepts (RFC 7591 §2). Other members are ignored.
type Metadata struct {
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	ClientName              string   `json:"client_name,omitempty"`
	ClientURI               string   `json:"client_uri,omitempty"`
	LogoURI                 string   `json:"logo_uri,omitempty"`
	Scope                   string   `json:"scope,omitempty"`
	Contacts                []string `json:"contacts,omitempty"`
	TOSURI                  string   `json:"tos_uri,omitempty"`
	PolicyURI               string   `json:"policy_uri,omitempty"`
	SoftwareID              string   `json:"software_id,omitempty"`
	SoftwareVersion         string   `json:"software_version,omitempty"`
	// DPoPBoundAccessTokens: the client will always send DPoP proofs, so a token request
	// without one is refused (RFC 9449 §5.2).
	DPoPBoundAccessTokens bool `json:"dpop_bound_access_tokens,omitempty"`
	// RequirePushedAuthorizationRequests: /authorize accepts only pushed requests for this
	// client (RFC 9126 §6).
	RequirePushedAuthorizationRequests bool `json:"require_pushed_authorization_requests,omitempty"`
}

var knownGrants = []string{
	site.GrantAuthorizationCode, site.GrantRefreshToken, site.GrantClientCredentials, site.GrantTokenExchange,
}

func metadataError(msg string) error { return oauth.ErrInvalidClientMetadata.WithDescription(msg) }

// Normalize fills RFC 7591 defaults and validates every field, returning the metadata as it
// will be stored. Redirect URIs are kept as the exact strings sent.
//
//nolint:funlen // one check per RFC 7591 client metadata field, in the order of the RFC's list
func (m *Metadata) Normalize() error {
	if m.TokenEndpointAuthMethod == "" {
		m.TokenEndpointAuthMethod = site.AuthClientSecretBasic
	}
	switch m.TokenEndpointAuthMethod {
	case site.AuthNone, site.AuthClientSecretBasic, site.AuthClientSecretPost:
	default:
		return metadataError("token_endpoint_auth_method must be none, client_secret_basic or client_secret_post")
	}

	explicitResponseTypes := m.ResponseTypes != nil
	if len(m.GrantTypes) == 0 {
		m.GrantTypes = []string{site.GrantAuthorizationCode}
	}
	m.GrantTypes = dedupe(m.GrantTypes)
	for _, g := range m.GrantTypes {
		if !slices.Contains(knownGrants, g) {
			return metadataError("grant type " + quote(g) + " is not supported")
		}
	}
	code := slices.Contains(m.GrantTypes, site.GrantAuthorizationCode)
	if !explicitResponseTypes {
		if code {
			m.ResponseTypes = []string{"code"}
		} else {
			m.ResponseTypes = []string{}
		}
	}
	m.ResponseTypes = dedupe(m.ResponseTypes)
	for _, rt := range m.ResponseTypes {
		if rt != "code" {
			return metadataError("only the response type code is supported")
		}
	}
	if code != slices.Contains(m.ResponseTypes, "code") {
		return metadataError("grant type authorization_code and response type code go together")
	}
	if slices.Contains(m.GrantTypes, site.GrantRefreshToken) && !code {
		return metadataError("refresh_token needs authorization_code")
	}
	if slices.Contains(m.GrantTypes, site.GrantClientCredentials) && m.TokenEndpointAuthMethod == site.AuthNone {
		return metadataError("client_credentials needs a confidential client (token_endpoint_auth_method other than none)")
	}

	if code && len(m.RedirectURIs) == 0 {
		return oauth.ErrInvalidRedirectURI.WithDescription("redirect_uris is required for the authorization code grant")
	}
	if len(m.RedirectURIs) > maxRedirectURIs {
		return oauth.ErrInvalidRedirectURI.WithDescription("too many redirect_uris")
	}
	m.RedirectURIs = dedupe(m.RedirectURIs)
	for _, u := range m.RedirectURIs {
		if err := ValidRedirectURI(u); err != nil {
			return err
		}
	}

	if err := validText("client_name", m.ClientName, maxNameLen); err != nil {
		return err
	}
	for field, v := range map[string]string{
		"client_uri": m.ClientURI, "logo_uri": m.LogoURI, "tos_uri": m.TOSURI, "policy_uri": m.PolicyURI,
	} {
		if v != "" && !httpsURL(v) {
			return metadataError(field + " must be an https URL of at most 2000 characters")
		}
	}
	if m.Scope != "" {
		scopes, err := oauth.ParseScope(m.Scope)
		if err != nil {
			return metadataError("scope holds an invalid scope")
		}
		m.Scope = strings.Join(scopes, " ")
	}
	if len(m.Contacts) > maxContacts {
		return metadataError("too many contacts")
	}
	for _, c := range m.Contacts {
		if err := validText("contacts", c, maxContactLen); err != nil {
			return err
		}
	}
	if err := validText("software_id", m.SoftwareID, maxSoftwareLen); err != nil {
		return err
	}
	return validText("software_version", m.SoftwareVersion, maxSoftwareLen)
}

// ValidRedirectURI accepts, as exact strings: https URLs; http URLs to the person's own
// machine (loopback IP literals and localhost); and private-use schemes in reverse-domain form
// (RFC 8252 §7.1). No fragments, no user info (it makes addresses read as something they are
// not: https://claude.ai@evil.example/), no raw spaces, control or non-ASCII characters.
func ValidRedirectURI(s string) error {
	bad := func(why string) error {
		return oauth.ErrInvalidRedirectURI.WithDescription("redirect URI " + quote(s) + ": " + why)
	}
	if len(s) > maxURILen {
		return oauth.ErrInvalidRedirectURI.WithDescription("a redirect URI is longer than 2000 characters")
	}
	// The syntax every redirect URI must have, wherever it comes from (registration,
	// OAuthClient resources, metadata documents); the checks below narrow it further.
	if err := redirect.ValidateRedirectURI(s); err != nil {
		return bad(strings.TrimPrefix(err.Error(), "redirect URI "))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f || c == '\\' {
			return bad("contains a character that must be percent-encoded")
		}
	}
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() {
		return bad("must be an absolute URI")
	}
	if strings.Contains(s, "#") {
		return bad("must not have a fragment")
	}
	if u.User != nil {
		return bad("must not contain user information")
	}
	switch u.Scheme {
	case "https":
		if u.Host == "" || u.Hostname() == "" {
			return bad("must name a host")
		}
	case "http":
		if !loopbackHost(u.Hostname()) {
			return bad("http is allowed only for loopback addresses; use https")
		}
	default:
		// Private-use scheme: reverse domain name, at least one dot (com.example.app).
		if !strings.Contains(u.Scheme, ".") {
			return bad("custom schemes must be reverse domain names such as com.example.app")
		}
		if u.Host != "" {
			return bad("a private-use scheme URI has no host part (com.example.app:/callback)")
		}
	}
	return nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback() && a.Zone() == ""
}

func httpsURL(s string) bool {
	if len(s) > maxURILen {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https" && u.Host != "" && u.User == nil
}

func validText(field, s string, limit int) error {
	if s == "" {
		return nil
	}
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > limit {
		return metadataError(field + " must be at most " + itoa(limit) + " characters")
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError || unicode.Is(unicode.Bidi_Control, r) {
			return metadataError(field + " contains control characters")
		}
	}
	return nil
}

func dedupe(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// quote echoes a value in an error only when it is short; it is the client's own input.
func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return "\"" + strings.ToValidUTF8(s, "") + "\""
}

func itoa(n int) string { return strconv.Itoa(n) }
