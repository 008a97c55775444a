package site

import (
	"strings"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

// PersonActive reports whether the person can still sign in to the project: someone removed
// from the password file, or whose identity provider the project no longer trusts, loses their
// sessions and their tokens at once rather than when those expire. While the password file is
// unavailable (its Secret missing or broken) nobody can tell who was removed, so none of its
// people is active: a typo in the Secret signs the password people out until it is fixed
// (the Project is Degraded and says so), where the other way round it would let someone
// removed in the same edit carry on (docs/leavers.md, decision 0050).
func PersonActive(p *config.Project, person store.Person) bool {
	switch person.Source {
	case "password":
		if p.SignIn.PasswordsUnavailable {
			return false
		}
		_, ok := p.SignIn.Passwords[person.SourceSubject]
		return ok
	case "oidc":
		return p.SignIn.OIDC != nil && strings.HasPrefix(person.SourceSubject, p.SignIn.OIDC.Issuer+"|")
	case "id-jag":
		// People an identity assertion issuer speaks for (webhook/idjag) stay while the
		// project trusts that issuer.
		for iss := range p.IdentityAssertions.Issuers {
			if strings.HasPrefix(person.SourceSubject, iss+"|") {
				return true
			}
		}
	}
	return false
}
