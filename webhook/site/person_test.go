package site

import (
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

func TestPersonActive(t *testing.T) {
	pw := store.Person{Source: "password", SourceSubject: "alice@example.com"}
	sso := store.Person{Source: "oidc", SourceSubject: "https://idp.example|carol"}
	file := map[string]config.PasswordUser{"alice@example.com": {Email: "alice@example.com"}}
	idp := &config.OIDCProvider{Issuer: "https://idp.example"}
	for _, c := range []struct {
		name   string
		signIn config.SignIn
		person store.Person
		want   bool
	}{
		{"in the file", config.SignIn{Passwords: file}, pw, true},
		{"removed from the file", config.SignIn{Passwords: map[string]config.PasswordUser{}}, pw, false},
		{"no password file", config.SignIn{}, pw, false},
		// A broken Secret cannot say who was removed: nobody of the file is active until it is
		// fixed (fail closed), so someone removed in the same edit is out too.
		{"file unavailable", config.SignIn{PasswordsUnavailable: true}, pw, false},
		{"provider trusted", config.SignIn{OIDC: idp}, sso, true},
		{"provider unavailable", config.SignIn{OIDC: &config.OIDCProvider{Issuer: idp.Issuer, Unavailable: true}}, sso, true},
		{"provider no longer named", config.SignIn{OIDC: &config.OIDCProvider{Issuer: "https://other.example"}}, sso, false},
		{"file unavailable, oidc person", config.SignIn{PasswordsUnavailable: true}, sso, false},
		{"unknown source", config.SignIn{PasswordsUnavailable: true}, store.Person{Source: "other"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := PersonActive(&config.Project{SignIn: c.signIn}, c.person); got != c.want {
				t.Errorf("PersonActive = %v, want %v", got, c.want)
			}
		})
	}
}
