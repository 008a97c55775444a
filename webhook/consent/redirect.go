package consent

import (
	"net/netip"
	"net/url"
	"strings"
)

// MatchRedirect reports whether requested is one of the registered redirect URIs. Matching is
// by exact string (seed 004: not a prefix, not the same origin, the same string). The one
// exception is RFC 8252 §7.3: for an http redirect to a loopback IP literal, the port may
// differ, because native apps listen on whatever port the system gives them.
func MatchRedirect(registered []string, requested string) bool {
	for _, r := range registered {
		if r == requested {
			return true
		}
	}
	u, ok := loopbackURL(requested)
	if !ok {
		return false
	}
	for _, r := range registered {
		ru, ok := loopbackURL(r)
		if ok && ru.Hostname() == u.Hostname() && ru.EscapedPath() == u.EscapedPath() &&
			ru.RawQuery == u.RawQuery && ru.ForceQuery == u.ForceQuery {
			return true
		}
	}
	return false
}

// loopbackURL parses an http URL whose host is a loopback IP literal, with nothing unusual
// about it (no user info, no fragment). Host names, localhost included, are not literals.
func loopbackURL(s string) (*url.URL, bool) {
	if !strings.HasPrefix(s, "http://") || strings.ContainsAny(s, "#\\@") {
		return nil, false
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Opaque != "" {
		return nil, false
	}
	a, err := netip.ParseAddr(u.Hostname())
	if err != nil || !a.IsLoopback() || a.Zone() != "" {
		return nil, false
	}
	return u, true
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
