package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"latchkey.dev/latchkey/webhook/callback/callbacktest"
)

const mcpChromium = "/usr/bin/chromium"

// mcpTab is one tab of a real Chromium, and what its console said (a blocked form submission
// shows there and nowhere else).
type mcpTab struct {
	ctx context.Context

	mu      sync.Mutex
	console []string
}

func (tab *mcpTab) consoleText() string {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	return strings.Join(tab.console, "\n")
}

// mcpBrowser starts a real Chromium with a fresh profile: a person's own browser, signed in
// nowhere yet. It skips the test when Chromium is missing (fails it in CI).
func mcpBrowser(t *testing.T) *mcpTab {
	t.Helper()
	_, err := os.Stat(mcpChromium)
	needTool(t, "Chromium ("+mcpChromium+")", err)
	alloc, cancel := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(mcpChromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
	)
	t.Cleanup(cancel)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(cancelCtx)
	// Start the browser now, so a broken installation shows as such and not as a page problem.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		needTool(t, "a working Chromium", err)
	}
	tab := &mcpTab{ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			tab.mu.Lock()
			tab.console = append(tab.console, string(m.Type)+": "+m.Text)
			tab.mu.Unlock()
		}
	}()
	return tab
}

// button finds a button by its visible text, as a person finds it.
func button(label string) string {
	return `//button[contains(normalize-space(.), "` + label + `")]`
}

// signedInAtGitHub puts the person's GitHub session into the browser, as if they had signed in
// to GitHub earlier, and records that they approved Latchkey's app there before: GitHub then
// skips its own pages, the case seed 002 starts from.
//
// Going through the fake GitHub's sign-in and approval forms in Chromium does not work yet: its
// pages declare form-action 'self' and answer both forms with a redirect to another site
// (Latchkey's callback), which Chromium blocks.
func (pp *mcpPerson) signedInAtGitHub(tab *mcpTab) error {
	c := pp.s.GitHub.SessionCookie(pp.GitHubLogin)
	httpOnly := true
	_, err := chromedp.Call(tab.ctx, network.SetCookie, network.SetCookieParams{
		Name: c.Name, Value: c.Value, URL: pp.s.GitHubURL + "/", Path: "/",
		HTTPOnly: &httpOnly, SameSite: network.CookieSameSiteLax,
	})
	pp.s.GitHub.Approve(pp.GitHubLogin, callbacktest.ClientID)
	return err
}

// openLinkInChromium is the person opening the connect link in their own browser: Latchkey
// asks them to sign in (check 2), the link page offers to connect GitHub (check 5), GitHub
// sends the browser straight back, and the callback, in the browser that started it, finishes
// at once. It returns the text of the last page.
//
// The wait is bounded so a page that never comes fails the test instead of hanging it; it is
// not a timing assertion.
func (pp *mcpPerson) openLinkInChromium(tab *mcpTab, link string) (string, error) {
	ctx, cancel := context.WithTimeout(tab.ctx, time.Minute)
	defer cancel()
	steps := []struct {
		what string
		do   chromedp.Action[chromedp.Void]
	}{
		{"open the link", chromedp.Navigate(link)},
		{"sign in to Latchkey", chromedp.Steps(
			chromedp.WaitVisible(chromedp.CSS(`input[name="username"]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name="username"]`), pp.Email),
			chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), pp.Password),
			chromedp.Click(button("Sign in")),
		)},
		{"press Connect on the link page", chromedp.Steps(
			chromedp.WaitVisible(button("Connect")),
			chromedp.Click(button("Connect")),
		)},
		{"reach the page that sends them back", chromedp.WaitVisible(`//*[contains(normalize-space(.), "Go back to")]`)},
	}
	for _, s := range steps {
		if err := chromedp.Do(ctx, s.do); err != nil {
			// Read where the person is stuck on the tab's own context: ctx may be spent.
			loc, _ := chromedp.Run(tab.ctx, chromedp.Location())
			body, _ := chromedp.Run(tab.ctx, chromedp.Text(chromedp.CSS("body")))
			return "", fmt.Errorf("%s: %v\nat %s: %s\nconsole:\n%s", s.what, err, loc, strings.Join(strings.Fields(body), " "), tab.consoleText())
		}
	}
	body, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	return strings.Join(strings.Fields(body), " "), err
}
