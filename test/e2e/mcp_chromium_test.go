package e2e

import (
	"strings"

	"latchkey.dev/latchkey/webhook/callback/callbacktest"
)

// signInAtGitHub signs the person in at the fake GitHub in their own browser and records that
// they approved Latchkey's app there before, so GitHub sends them straight back: the case seed
// 002 starts from. (Going through the fake GitHub's approval form does not work in a browser
// yet: its pages allow form submissions only to 'self' and answer with a redirect to Latchkey,
// which the browser blocks.)
func (pp *mcpPerson) signInAtGitHub(b *cbProfile) {
	b.t.Helper()
	b.open(pp.s.GitHubURL + "/login")
	b.fill("login", pp.GitHubLogin)
	b.fill("password", pp.GitHubPassw)
	b.press("Sign in")
	b.waitFor("404 page not found")
	pp.s.GitHub.Approve(pp.GitHubLogin, callbacktest.ClientID)
}

// openLinkInChromium is the person opening the connect link in their own browser: Latchkey
// asks them to sign in (check 2) and brings them back to the link, which offers to connect
// GitHub (check 5); GitHub sends the browser back to the callback, which, in the browser that
// started it, finishes at once. It returns what the last page says.
func (pp *mcpPerson) openLinkInChromium(b *cbProfile, link string) string {
	b.t.Helper()
	b.open(link)
	b.waitFor("Sign in to")
	b.fill("username", pp.Email)
	b.fill("password", pp.Password)
	b.press("Sign in")
	b.waitFor("Connect your GitHub account")
	if loc := b.location(); loc != link {
		b.t.Errorf("after signing in the person is at %s, want the link", loc)
	}
	b.press("Connect GitHub")
	text := b.waitFor("Go back to")
	if loc := b.location(); !strings.HasPrefix(loc, pp.s.CallbackURL) {
		b.t.Errorf("finishing went on to %s; it must stay on the callback's page", loc)
	}
	return strings.Join(strings.Fields(text), " ")
}
