// Package redirect decides what a redirect URI is, for the consent screen ("Where access goes"),
// for the "Only recognised apps can connect" policy, and for registration (docs/recognised-apps.md).
//
// A client can lie about its name and logo, but not about where the code is sent. So everything
// here works on the redirect URI exactly as registered: a callback is recognised only when its
// string is one of the canonical forms, byte for byte. Nothing is normalised and then accepted,
// because every normalisation (case, default ports, trailing dots, percent-decoding, IDN
// mapping, userinfo stripping) is a way for a look-alike to pass as the real thing.
//
// Decisions worth knowing:
//   - A URI that fails ValidateRedirectURI is always a Website, never an agent or a device, so
//     an unparseable or malformed string can never read as safe.
//   - Loopback counts as on-device over http and https alike: what keeps a phisher out is that
//     the code never leaves the person's machine, and that depends on the host, not the scheme.
//     The host must be written as an IPv4 literal in 127.0.0.0/8 (canonical dotted decimal),
//     exactly "[::1]", or exactly "localhost" (lower case, no trailing dot).
//   - MatchRegistered lets the port vary only for http loopback IP literals (RFC 8252 §7.3),
//     not for "localhost": a name can be resolved elsewhere (RFC 8252 §8.3, RFC 9700 §2.1
//     recommends IP literals), and a client that wants a free port should register 127.0.0.1.
package redirect

import (
	"errors"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"latchkey.dev/latchkey/internal/config"
)

// Kind is what a redirect URI is, as far as the person deciding is concerned.
type Kind string

const (
	// Agent is a recognised callback of a known agent (Claude, ChatGPT, a policy's own entry),
	// shown by name.
	Agent Kind = "agent"
	// Device is an app on the person's own device: a loopback address or a private-use scheme.
	Device Kind = "device"
	// Website is anything else: an unrecognised website, shown with a warning and in full.
	Website Kind = "website"
)

// DeviceName is the Name of every Device class.
const DeviceName = "an app on this device"

// Class is the classification of one redirect URI.
type Class struct {
	Kind Kind
	// Name is what the consent screen calls the destination: "Claude", "ChatGPT", the policy
	// entry's name, or DeviceName. Empty for a Website, whose URI is shown in full instead.
	Name string
	// URI is the redirect URI exactly as given.
	URI string
}

// Built-in recognised callbacks. ChatGPT's connector callback carries one path segment that
// varies per connector; nothing else in it varies.
const (
	ClaudeAICallback        = "https://claude.ai/api/mcp/auth_callback"
	ClaudeComCallback       = "https://claude.com/api/mcp/auth_callback"
	ChatGPTPlatformCallback = "https://chatgpt.com/connector_platform_oauth_redirect"
	ChatGPTConnectorPattern = "https://chatgpt.com/connector/oauth/{callback_id}"
)

// MaxLength bounds a redirect URI. Browsers cope with far more, but nothing legitimate needs it,
// and every stored and displayed copy is cheaper for the limit.
const MaxLength = 2000

// maxSegment bounds the one variable path segment of a pattern.
const maxSegment = 256

// Classify says what uri is under rules. It never fails: anything not recognised, including
// anything malformed, is a Website.
func Classify(uri string, rules config.RedirectRules) Class {
	c := Class{Kind: Website, URI: uri}
	if ValidateRedirectURI(uri) != nil {
		return c
	}
	if name, ok := recognise(uri, rules); ok {
		c.Kind, c.Name = Agent, name
		return c
	}
	if (rules.Loopback && isLoopback(uri)) || (rules.AppSchemes && isAppScheme(uri)) {
		c.Kind, c.Name = Device, DeviceName
	}
	return c
}

// Allowed returns the URIs that "Only recognised apps can connect" refuses: those that are
// neither a recognised agent callback nor on the person's device. Every registered redirect
// counts, because a token does not remember which redirect its code went to.
func Allowed(uris []string, rules config.RedirectRules) (refused []string) {
	for _, u := range uris {
		if Classify(u, rules).Kind == Website {
			refused = append(refused, u)
		}
	}
	return refused
}

// recognise matches uri against the enabled built-ins and the policy's named entries.
func recognise(uri string, rules config.RedirectRules) (string, bool) {
	if rules.Claude && (uri == ClaudeAICallback || uri == ClaudeComCallback) {
		return "Claude", true
	}
	if rules.ChatGPT && (uri == ChatGPTPlatformCallback || MatchPattern(ChatGPTConnectorPattern, uri)) {
		return "ChatGPT", true
	}
	for _, n := range rules.Named {
		if MatchPattern(n.Pattern, uri) {
			return n.Name, true
		}
	}
	return "", false
}

// ValidatePattern checks a recognised-callback pattern as a RedirectPolicy declares it: a valid
// redirect URI, optionally with one "{name}" placeholder standing for one whole path segment.
func ValidatePattern(pattern string) error {
	open := strings.IndexByte(pattern, '{')
	if open < 0 {
		if strings.IndexByte(pattern, '}') >= 0 {
			return errors.New("unbalanced '}' in pattern")
		}
		return ValidateRedirectURI(pattern)
	}
	prefix, rest := pattern[:open], pattern[open:]
	end := strings.IndexByte(rest, '}')
	if end < 0 {
		return errors.New("unbalanced '{' in pattern")
	}
	name, suffix := rest[1:end], rest[end+1:]
	if name == "" || !isSegment(name) {
		return errors.New("placeholder name must be letters, digits, '-', '_', '.' or '~'")
	}
	if strings.ContainsAny(suffix, "{}") {
		return errors.New("a pattern may hold one placeholder at most")
	}
	if !strings.HasSuffix(prefix, "/") || !(suffix == "" || suffix[0] == '/') {
		return errors.New("the placeholder must be a whole path segment")
	}
	u, err := url.Parse(prefix)
	if err != nil || u.RawQuery != "" || u.ForceQuery || u.Opaque != "" || u.Path == "" {
		return errors.New("the placeholder must be in the path")
	}
	return ValidateRedirectURI(prefix + "x" + suffix)
}

// MatchPattern reports whether uri is pattern exactly, or pattern with its one placeholder
// replaced by one non-empty path segment of unreserved characters. An invalid pattern matches
// nothing.
func MatchPattern(pattern, uri string) bool {
	if uri == pattern {
		return strings.IndexByte(pattern, '{') < 0 && ValidateRedirectURI(uri) == nil
	}
	open := strings.IndexByte(pattern, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(pattern[open:], '}')
	if end < 0 {
		return false
	}
	prefix, suffix := pattern[:open], pattern[open+end+1:]
	if len(uri) < len(prefix)+len(suffix) || !strings.HasPrefix(uri, prefix) || !strings.HasSuffix(uri, suffix) {
		return false
	}
	seg := uri[len(prefix) : len(uri)-len(suffix)]
	if !isSegment(seg) || seg == "." || seg == ".." {
		return false
	}
	return ValidatePattern(pattern) == nil
}

// isSegment: 1..maxSegment RFC 3986 unreserved characters. No '%' (an encoded '/' or '?' could
// smuggle structure), no sub-delims, no ':' or '@'.
func isSegment(s string) bool {
	if s == "" || len(s) > maxSegment {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isUnreserved(s[i]) {
			return false
		}
	}
	return true
}

func isUnreserved(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '-' || b == '.' || b == '_' || b == '~'
}

// isURIChar reports whether b may appear in a URI as written (RFC 3986 §2: unreserved,
// reserved, and '%' for escapes). Everything else — space, controls, backslash, quotes, angle
// brackets, non-ASCII — is refused rather than guessed at.
func isURIChar(b byte) bool {
	if isUnreserved(b) {
		return true
	}
	return strings.IndexByte(":/?#[]@!$&'()*+,;=%", b) >= 0
}

// ValidateRedirectURI checks the syntax every redirect URI must have, wherever it comes from
// (dynamic registration, OAuthClient resources, client ID metadata documents):
//   - at most MaxLength characters of RFC 3986 URI characters, escapes well formed;
//   - absolute, with a lower-case scheme; no fragment; no userinfo;
//   - https with a host; or http only to a loopback host (127.0.0.0/8, [::1], localhost);
//   - or a private-use scheme in reverse-domain form (RFC 8252 §7.1: it contains a dot, as in
//     com.example.app:/callback).
func ValidateRedirectURI(uri string) error {
	if uri == "" {
		return errors.New("redirect URI is empty")
	}
	if len(uri) > MaxLength {
		return errors.New("redirect URI is longer than " + strconv.Itoa(MaxLength) + " characters")
	}
	for i := 0; i < len(uri); i++ {
		b := uri[i]
		if !isURIChar(b) {
			return errors.New("redirect URI contains a character not allowed in a URI")
		}
		if b == '%' && (i+2 >= len(uri) || !isHex(uri[i+1]) || !isHex(uri[i+2])) {
			return errors.New("redirect URI contains a malformed percent-escape")
		}
	}
	if strings.IndexByte(uri, '#') >= 0 {
		return errors.New("redirect URI must not contain a fragment")
	}
	colon := strings.IndexByte(uri, ':')
	if colon <= 0 {
		return errors.New("redirect URI must be absolute")
	}
	scheme := uri[:colon]
	if !validScheme(scheme) {
		return errors.New("redirect URI scheme must be lower case letters, digits, '+', '-' or '.'")
	}
	u, err := url.Parse(uri)
	if err != nil {
		return errors.New("redirect URI does not parse")
	}
	if u.User != nil {
		return errors.New("redirect URI must not contain userinfo")
	}
	switch scheme {
	case "https":
		if !strings.HasPrefix(uri, "https://") {
			return errors.New("https redirect URI must have a host")
		}
		return validateHost(uri[len("https://"):])
	case "http":
		if !strings.HasPrefix(uri, "http://") {
			return errors.New("http redirect URI must have a host")
		}
		if err := validateHost(uri[len("http://"):]); err != nil {
			return err
		}
		if !loopbackHost(authority(uri[len("http://"):])) {
			return errors.New("http is allowed only for loopback redirect URIs (127.0.0.1, [::1], localhost); use https")
		}
		return nil
	}
	if !validPrivateScheme(scheme) {
		return errors.New("redirect URI must use https, http on loopback, or a private-use scheme in reverse-domain form (com.example.app:/callback)")
	}
	rest := uri[colon+1:]
	if rest == "" {
		return errors.New("private-use redirect URI needs a path")
	}
	if strings.HasPrefix(rest, "//") {
		// An authority is allowed (many apps register app.example.x://callback), but it must be a
		// plain host, so nothing in it can read as somebody else's address.
		return validateHost(rest[2:])
	}
	return nil
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

func validScheme(s string) bool {
	if s == "" || !('a' <= s[0] && s[0] <= 'z') {
		return false
	}
	for i := 1; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '+' || b == '-' || b == '.') {
			return false
		}
	}
	return true
}

// validPrivateScheme: a reverse domain name, so at least two non-empty dot-separated labels.
func validPrivateScheme(s string) bool {
	if !strings.Contains(s, ".") {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return false
		}
	}
	return true
}

// authority returns the authority part of what follows "scheme://".
func authority(afterSlashes string) string {
	if i := strings.IndexAny(afterSlashes, "/?#"); i >= 0 {
		return afterSlashes[:i]
	}
	return afterSlashes
}

// splitHostPort splits an authority without userinfo into host and port ("" when absent).
// hasPort reports whether a ':' separated a port, even an empty one.
func splitHostPort(auth string) (host, port string, hasPort bool) {
	if strings.HasPrefix(auth, "[") {
		end := strings.IndexByte(auth, ']')
		if end < 0 {
			return auth, "", false
		}
		host, rest := auth[:end+1], auth[end+1:]
		if strings.HasPrefix(rest, ":") {
			return host, rest[1:], true
		}
		if rest != "" {
			return host, rest, true // malformed; validatePort rejects it
		}
		return host, "", false
	}
	if i := strings.LastIndexByte(auth, ':'); i >= 0 {
		return auth[:i], auth[i+1:], true
	}
	return auth, "", false
}

// validateHost checks the authority of a hierarchical redirect URI: a DNS-style name or an IP
// literal, and an optional numeric port. Percent-escapes, userinfo and empty hosts are refused.
func validateHost(afterSlashes string) error {
	auth := authority(afterSlashes)
	if strings.IndexByte(auth, '@') >= 0 {
		return errors.New("redirect URI must not contain userinfo")
	}
	host, port, hasPort := splitHostPort(auth)
	if host == "" {
		return errors.New("redirect URI must have a host")
	}
	if hasPort && !validPort(port) {
		return errors.New("redirect URI port must be a number from 1 to 65535")
	}
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return errors.New("redirect URI has a malformed IPv6 host")
		}
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return errors.New("redirect URI has a malformed IPv6 host")
		}
		return nil
	}
	for i := 0; i < len(host); i++ {
		b := host[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '.') {
			return errors.New("redirect URI host must be a DNS name or an IP address")
		}
	}
	return nil
}

// validPort: 1..65535 written without leading zeros or signs.
func validPort(p string) bool {
	if p == "" || len(p) > 5 || p[0] == '0' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	n, _ := strconv.Atoi(p)
	return n >= 1 && n <= 65535
}

// loopbackHost reports whether an authority names the person's own machine, as written: no
// resolution, no normalisation.
func loopbackHost(auth string) bool {
	host, port, hasPort := splitHostPort(auth)
	if hasPort && !validPort(port) {
		return false
	}
	return host == "localhost" || loopbackIPLiteral(host)
}

// loopbackIPLiteral: a canonical dotted-decimal IPv4 address in 127.0.0.0/8 or exactly "[::1]".
// netip refuses leading zeros, octal, hex and shortened forms, and the String round trip
// refuses anything else that is not written canonically.
func loopbackIPLiteral(host string) bool {
	if host == "[::1]" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Is4() && a.IsLoopback() && a.String() == host
}

func isLoopback(uri string) bool {
	for _, s := range []string{"http://", "https://"} {
		if strings.HasPrefix(uri, s) {
			return loopbackHost(authority(uri[len(s):]))
		}
	}
	return false
}

func isAppScheme(uri string) bool {
	colon := strings.IndexByte(uri, ':')
	if colon <= 0 {
		return false
	}
	s := uri[:colon]
	return s != "http" && s != "https" && validScheme(s) && validPrivateScheme(s)
}

// MatchRegistered reports whether presented is one of the registered redirect URIs. The match
// is exact, string for string. The one exception is RFC 8252 §7.3: for an http redirect to a
// loopback IP literal the port may differ (native apps listen on whatever port is free), while
// scheme, host, path and query must still match exactly. "localhost" gets no such leeway.
func MatchRegistered(registered []string, presented string) bool {
	for _, r := range registered {
		if r == presented {
			return true
		}
	}
	host, rest, ok := loopbackIPParts(presented)
	if !ok || ValidateRedirectURI(presented) != nil {
		return false
	}
	for _, r := range registered {
		rh, rr, ok := loopbackIPParts(r)
		if ok && rh == host && rr == rest && ValidateRedirectURI(r) == nil {
			return true
		}
	}
	return false
}

// loopbackIPParts splits "http://127.0.0.1:8080/cb?x" into host "127.0.0.1" and the rest
// "/cb?x", dropping the port, when the URI is http to a loopback IP literal.
func loopbackIPParts(uri string) (host, rest string, ok bool) {
	const scheme = "http://"
	if !strings.HasPrefix(uri, scheme) {
		return "", "", false
	}
	after := uri[len(scheme):]
	auth := authority(after)
	host, port, hasPort := splitHostPort(auth)
	if hasPort && !validPort(port) {
		return "", "", false
	}
	if !loopbackIPLiteral(host) {
		return "", "", false
	}
	return host, after[len(auth):], true
}
