package e2e

import (
	"strings"

	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
)

// signInAtGitHub signs the person in at the fake GitHub in their own browser and records that they
// approved Latchkey's app there before, so GitHub sends them straight back without asking: the
// case in which a forwarded authorization URL would connect the wrong account. (Going through the
// fake GitHub's approval form does not work in a browser yet: its pages allow form submissions
// only to 'self' and answer with a redirect to Latchkey, which the browser blocks.)
func (pp *mcpPerson) signInAtGitHub(b *testbrowser.Profile) {
	b.T.Helper()
	b.Open(pp.s.GitHubURL + "/login")
	b.Fill("login", pp.GitHubLogin)
	b.Fill("password", pp.GitHubPassw)
	b.Press("Sign in")
	b.WaitFor("404 page not found")
	pp.s.GitHub.Approve(pp.GitHubLogin, stack.GitHubClientID)
}

// openLinkInChromium is the person opening the connect link in their own browser: Latchkey
// asks them to sign in (check 2) and brings them back to the link, which offers to connect
// GitHub (check 5); GitHub sends the browser back to the callback, which, in the browser that
// started it, finishes at once. It returns what the last page says.
func (pp *mcpPerson) openLinkInChromium(b *testbrowser.Profile, link string) string {
	b.T.Helper()
	b.Open(link)
	b.WaitFor("Sign in to")
	b.Fill("username", pp.Email)
	b.Fill("password", pp.Password)
	b.Press("Sign in")
	b.WaitFor("Connect your GitHub account")
	if loc := b.Location(); loc != link {
		b.T.Errorf("after signing in the person is at %s, want the link", loc)
	}
	b.Press("Connect GitHub")
	text := b.WaitFor("Go back to")
	if loc := b.Location(); !strings.HasPrefix(loc, pp.s.CallbackURL) {
		b.T.Errorf("finishing went on to %s; it must stay on the callback's page", loc)
	}
	return strings.Join(strings.Fields(text), " ")
}
