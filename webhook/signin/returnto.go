package signin

import (
	"net/url"
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/webhook/site"
)

const maxReturnTo = 4096

// SafeReturn accepts return_to only as a path under the project's issuer, so sign-in can never
// become an open redirect: no scheme, no host, no "//" or backslash tricks, no control or
// non-ASCII bytes, no dot segments (encoded or not) that could climb out of the issuer.
func SafeReturn(p *config.Project, raw string) (string, bool) {
	if raw == "" || len(raw) > maxReturnTo || raw[0] != '/' || strings.HasPrefix(raw, "//") {
		return "", false
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c < 0x21 || c > 0x7e || c == '\\' {
			return "", false
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "", false
	}
	base := site.IssuerPath(p)
	if base == "" || (u.Path != base && !strings.HasPrefix(u.Path, base+"/")) {
		return "", false
	}
	for seg := range strings.SplitSeq(u.Path, "/") {
		if seg == "." || seg == ".." || strings.Contains(seg, "\\") {
			return "", false
		}
	}
	return raw, true
}

// DefaultReturn is where sign-in goes when no usable return_to was given.
func DefaultReturn(p *config.Project) string { return site.IssuerPath(p) + "/account" }
