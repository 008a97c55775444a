package signin

import (
	"encoding/json"
	"slices"
	"strings"

	"latchkey.dev/latchkey/internal/config"
)

// Reasons a person the provider vouches for is still refused (decision 0063).
const (
	reasonDomainNotAllowed = "domain_not_allowed"
	reasonGroupNotAllowed  = "group_not_allowed"
)

// admitted reports whether the ID token's claims pass the project's allowedEmailDomains and
// allowedGroups, and if not, the reason code. The domain is the part after the email's last
// "@", compared exactly, so neither "example.com.evil.test" nor "evilexample.com" passes for
// "example.com"; an email the provider has not verified never passes, since anyone can type
// any address into a self-service account.
func admitted(o *config.OIDCProvider, claims map[string]json.RawMessage) (bool, string) {
	if len(o.AllowedEmailDomains) > 0 {
		var email string
		var verified any
		_ = json.Unmarshal(claims["email"], &email)
		_ = json.Unmarshal(claims["email_verified"], &verified)
		at := strings.LastIndexByte(email, '@')
		// Some providers send email_verified as the string "true".
		ok := verified == true || verified == "true"
		if !ok || at <= 0 || !slices.Contains(o.AllowedEmailDomains, strings.ToLower(email[at+1:])) {
			return false, reasonDomainNotAllowed
		}
	}
	if len(o.AllowedGroups) > 0 {
		raw := claims[o.GroupsClaim]
		var groups []string
		if json.Unmarshal(raw, &groups) != nil {
			var one string
			if json.Unmarshal(raw, &one) != nil || one == "" {
				return false, reasonGroupNotAllowed
			}
			groups = []string{one}
		}
		if !slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(o.AllowedGroups, g) }) {
			return false, reasonGroupNotAllowed
		}
	}
	return true, ""
}
