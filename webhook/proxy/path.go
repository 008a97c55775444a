package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"latchkey.dev/latchkey/internal/config"
)

// maxPath bounds the path forwarded; longer ones are refused before anything is looked up.
const maxPath = 4096

var errPath = errors.New("the path must not hold '.' or '..' segments, empty segments, encoded slashes, backslashes or control characters")

// cleanPath checks the escaped path an agent asked for and returns it decoded: what the rules
// are matched against, and (escaped again, canonically) what the service is sent, so the
// service reads exactly the path that was checked. Anything a service or a proxy between could
// read as another path is refused, not repaired: a '.' or '..' segment, plain or
// percent-encoded; an empty segment ("//"); an encoded slash or backslash, which some servers
// decode into a separator; a backslash; a NUL or another control character.
func cleanPath(escaped string) (string, error) {
	if escaped == "" {
		escaped = "/"
	}
	if len(escaped) > maxPath || escaped[0] != '/' {
		return "", errPath
	}
	lower := strings.ToLower(escaped)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(escaped, `\`) {
		return "", errPath
	}
	decoded, err := url.PathUnescape(escaped)
	if err != nil {
		return "", errPath
	}
	for i := 0; i < len(decoded); i++ {
		if c := decoded[i]; c < 0x20 || c == 0x7f {
			return "", errPath
		}
	}
	segs := strings.Split(decoded[1:], "/")
	for i, s := range segs {
		// A trailing slash (an empty last segment) is a path of its own at most services.
		if s == "." || s == ".." || (s == "" && i < len(segs)-1) {
			return "", errPath
		}
	}
	return decoded, nil
}

// escape is p as a request path: each segment percent-encoded where it must be, nothing else.
func escape(p string) string {
	return (&url.URL{Path: p}).EscapedPath()
}

// allowed reports whether a rule admits method on path: one of its methods, and its prefix
// whole segments of path ("/user" admits /user and /user/repos, never /users).
func allowed(rules []config.ProxyRule, method, path string) bool {
	for _, r := range rules {
		if slices.Contains(r.Methods, method) && under(path, r.PathPrefix) {
			return true
		}
	}
	return false
}

func under(path, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(path, prefix)
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// NotCanonical reports whether r is for the token proxy of some issuer under base and its path
// is one http.ServeMux would redirect to a cleaned form ("." or ".." segments, "//"): the
// server refuses it (RefusePath) rather than send the agent elsewhere.
func NotCanonical(base string, r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, base+"/")
	if !ok {
		return false
	}
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) < 4 || parts[2] != "proxy" {
		return false
	}
	p := r.URL.Path
	return strings.Contains(p, "//") || strings.Contains(p, "/./") || strings.Contains(p, "/../") ||
		strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..")
}

// RefusePath answers a path the proxy will not forward.
func RefusePath(w http.ResponseWriter, _ *http.Request) {
	problem(http.StatusBadRequest, "invalid_path", "The path cannot be forwarded", errPath.Error()).Write(w)
}
