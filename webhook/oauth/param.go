package oauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
)

// Limits on request parameters; anything larger is a client's mistake, not a 500.
const (
	maxScopes       = 50
	maxScopeLen     = 200
	maxResources    = 10
	maxResourceLen  = 2048
	minVerifierLen  = 43
	maxVerifierLen  = 128
	challengeLength = 43 // base64url(SHA-256) without padding
)

// ParseScope splits a scope parameter (RFC 6749 §3.3) into distinct scope tokens, in order.
func ParseScope(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for tok := range strings.SplitSeq(s, " ") {
		if tok == "" {
			continue
		}
		if len(tok) > maxScopeLen || !scopeToken(tok) {
			return nil, ErrInvalidScope.WithDescription("the scope parameter holds an invalid scope")
		}
		if !slices.Contains(out, tok) {
			out = append(out, tok)
		}
		if len(out) > maxScopes {
			return nil, ErrInvalidScope.WithDescription("too many scopes")
		}
	}
	return out, nil
}

// scopeToken: 1*( %x21 / %x23-5B / %x5D-7E ).
func scopeToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c == 0x22 || c == 0x5c || c > 0x7e {
			return false
		}
	}
	return true
}

// Subset reports whether every element of a is in b.
func Subset(a, b []string) bool {
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

// ParseResources validates RFC 8707 resource indicators: absolute URIs without a fragment.
func ParseResources(vals []string) ([]string, error) {
	var out []string
	for _, v := range vals {
		if v == "" {
			continue
		}
		if len(v) > maxResourceLen {
			return nil, ErrInvalidTarget.WithDescription("resource is too long")
		}
		u, err := url.Parse(v)
		if err != nil || !u.IsAbs() || u.Fragment != "" || strings.Contains(v, "#") {
			return nil, ErrInvalidTarget.WithDescription("resource must be an absolute URI without a fragment")
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
		if len(out) > maxResources {
			return nil, ErrInvalidTarget.WithDescription("too many resources")
		}
	}
	return out, nil
}

// ValidChallenge reports whether s can be an S256 code challenge.
func ValidChallenge(s string) bool {
	return len(s) == challengeLength && unreserved(s)
}

// ValidVerifier reports whether s is a well-formed PKCE code verifier (RFC 7636 §4.1).
func ValidVerifier(s string) bool {
	return len(s) >= minVerifierLen && len(s) <= maxVerifierLen && unreserved(s)
}

func unreserved(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// VerifyS256 checks a code verifier against an S256 challenge in constant time.
func VerifyS256(verifier, challenge string) bool {
	sum := sha256.Sum256([]byte(verifier))
	want := base64.RawURLEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(want), []byte(challenge)) == 1
}
