package consent

import (
	"net/url"
	"strings"

	"latchkey.dev/latchkey/internal/redirect"
)

// MatchRedirect reports whether requested is one of the registered redirect URIs: the same string
// (not a prefix, not the same origin: docs/recognised-apps.md), except that an http redirect to a
// loopback IP literal may name another port (RFC 8252 §7.3). It is redirect.MatchRegistered, the
// one matcher every flow uses.
func MatchRedirect(registered []string, requested string) bool {
	return redirect.MatchRegistered(registered, requested)
}

// formSource is the CSP source that lets the consent form's answer redirect to uri.
func formSource(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" {
		return ""
	}
	switch u.Scheme {
	case "http", "https":
		if strings.Contains(u.Host, "[") || strings.ContainsAny(u.Host, " ;,'") {
			// CSP host sources cannot express IPv6 literals; allow the scheme on this one page.
			return u.Scheme + ":"
		}
		return u.Scheme + "://" + u.Host
	}
	for i := 0; i < len(u.Scheme); i++ {
		c := u.Scheme[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return ""
		}
	}
	return u.Scheme + ":"
}

// appendQuery adds parameters to a redirect URI, keeping any query it already has.
func appendQuery(uri string, params url.Values) string {
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	return uri + sep + params.Encode()
}
