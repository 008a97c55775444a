package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// cbChromium finds Chromium for the browser tests: $LATCHKEY_CHROMIUM, then /usr/bin/chromium,
// then the PATH. Without one the test is skipped, except on CI (CI=true), where a missing
// browser must fail rather than quietly test nothing.
func cbChromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LATCHKEY_CHROMIUM"), "/usr/bin/chromium"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Chromium not found (set LATCHKEY_CHROMIUM); browser tests cannot be skipped on CI")
	}
	t.Skip("Chromium not found; set LATCHKEY_CHROMIUM to run the browser tests")
	return ""
}

// cbProfile is one person's browser: its own Chromium process and profile directory, so
// cookies (Latchkey's and the fake GitHub's) are never shared between people.
type cbProfile struct {
	t    *testing.T
	name string
	ctx  context.Context
}

func cbNewProfile(t *testing.T, parent context.Context, name string) *cbProfile {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(cbChromium(t)),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("%s: starting Chromium: %v", name, err)
	}
	return &cbProfile{t: t, name: name, ctx: ctx}
}

func (p *cbProfile) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
}

// open navigates to u.
func (p *cbProfile) open(u string) {
	p.t.Helper()
	p.do(chromedp.Navigate(u))
}

// text is what the page says, as the person reads it.
func (p *cbProfile) text() string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		p.t.Fatalf("%s: reading the page: %v", p.name, err)
	}
	return s
}

// location is the address the browser shows.
func (p *cbProfile) location() string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Location())
	if err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
	return s
}

// waitFor waits until the page says want (after redirects and a meta refresh settle) and
// returns the page's text. Checking again and again is only how a test learns that a
// navigation finished; nothing here waits for time to pass.
func (p *cbProfile) waitFor(want string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	last := ""
	for {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState === "complete" && document.body ? document.body.innerText : ""`))
		if err == nil {
			last = s
			if strings.Contains(s, want) {
				return s
			}
		}
		select {
		case <-ctx.Done():
			loc, _ := chromedp.Run(p.ctx, chromedp.Location())
			p.t.Fatalf("%s: page at %s never said %q; it says:\n%s", p.name, loc, want, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// press clicks the button whose visible text is label.
func (p *cbProfile) press(label string) {
	p.t.Helper()
	p.do(chromedp.Click(chromedp.Search(fmt.Sprintf(`//button[normalize-space()=%q]`, label))))
}

// fill types into the field with that id.
func (p *cbProfile) fill(id, value string) {
	p.t.Helper()
	p.do(chromedp.SendKeys(chromedp.ID(id), value))
}

// cookies are the browser's cookies for u.
func (p *cbProfile) cookies(u string) []*network.Cookie {
	p.t.Helper()
	res, err := chromedp.Call(p.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{u}})
	if err != nil {
		p.t.Fatalf("%s: reading cookies: %v", p.name, err)
	}
	return res.Cookies
}

// block stops the browser from loading anything under prefix (the person does not open it).
func (p *cbProfile) block(prefix string) {
	p.t.Helper()
	_, err := chromedp.Call(p.ctx, network.SetBlockedURLs, network.SetBlockedURLsParams{
		URLPatterns: []*network.BlockPattern{{URLPattern: prefix + "/*", Block: true}},
	})
	if err != nil {
		p.t.Fatalf("%s: blocking %s: %v", p.name, prefix, err)
	}
}

// pressAndCapture presses label and returns the first address the browser is sent to that
// starts with prefix.
func (p *cbProfile) pressAndCapture(label, prefix string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	events := chromedp.Events(ctx, network.RequestWillBeSent)
	p.press(label)
	for ev, err := range events {
		if err != nil {
			p.t.Fatalf("%s: waiting for the redirect: %v", p.name, err)
		}
		if strings.HasPrefix(ev.Request.URL, prefix) {
			return ev.Request.URL
		}
	}
	p.t.Fatalf("%s: never sent to %s: %v", p.name, prefix, ctx.Err())
	return ""
}
