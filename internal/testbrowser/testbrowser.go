// Package testbrowser drives a real Chromium for tests: one headless browser per person, each
// with its own profile, so cookies are never shared between people. Only tests import it.
package testbrowser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"latchkey.dev/latchkey/internal/testenv"
)

// Chromium finds Chromium for the browser tests: $LATCHKEY_CHROMIUM, then /usr/bin/chromium,
// then the PATH. Without one the test is skipped, except on CI (CI=true), where a missing
// browser must fail rather than quietly test nothing. Under -short it skips before looking.
func Chromium(t testing.TB) string {
	t.Helper()
	testenv.SkipShort(t, "Chromium")
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

// Profile is one person's browser: its own Chromium process and profile directory.
type Profile struct {
	// T reports failures; a subtest sets its own so failures land where they happen.
	T    testing.TB
	Name string
	// Ctx is the browser's context, for chromedp calls a test makes itself.
	Ctx context.Context
}

// New starts a headless Chromium with a fresh profile, stopped when the test ends. parent bounds
// its life; flags are added to the usual ones.
func New(t testing.TB, parent context.Context, name string, flags ...chromedp.ExecAllocatorOption) *Profile {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium(t)),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	opts = append(opts, flags...)
	actx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts the browser; it lives as long as ctx.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("%s: starting Chromium: %v", name, err)
	}
	return &Profile{T: t, Name: name, Ctx: ctx}
}

// Do runs steps, failing the test if they do not finish in time.
func (p *Profile) Do(steps ...chromedp.Action[chromedp.Void]) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.T.Fatalf("%s: %v", p.Name, err)
	}
}

// Open navigates to u. A navigation the previous step left settling (a redirect to a blocked
// address that the test captured) can abort this one with net::ERR_ABORTED on a loaded
// machine; the second attempt starts from a quiet tab.
func (p *Profile) Open(u string) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.Navigate(u))
	if err != nil && strings.Contains(err.Error(), "net::ERR_ABORTED") {
		err = chromedp.Do(ctx, chromedp.Navigate(u))
	}
	if err != nil {
		p.T.Fatalf("%s: %v", p.Name, err)
	}
}

// Fill types into the field with that id.
func (p *Profile) Fill(id, value string) {
	p.T.Helper()
	p.Do(chromedp.SendKeys(chromedp.ID(id), value))
}

// Press clicks the button whose visible text is label.
func (p *Profile) Press(label string) {
	p.T.Helper()
	p.Do(chromedp.Click(chromedp.Search(fmt.Sprintf(`//button[normalize-space()=%q]`, label))))
}

// Eval evaluates js in the page; T is what the expression evaluates to.
func Eval[T any](p *Profile, js string) T {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.T.Fatalf("%s: %s: %v", p.Name, js, err)
	}
	return v
}

// Text is what the page says, as the person reads it.
func (p *Profile) Text() string {
	p.T.Helper()
	return Eval[string](p, `document.body ? document.body.innerText : ""`)
}

// Location is the address the browser shows.
func (p *Profile) Location() string {
	p.T.Helper()
	s, err := chromedp.Run(p.Ctx, chromedp.Location())
	if err != nil {
		p.T.Fatalf("%s: %v", p.Name, err)
	}
	return s
}

// WaitFor waits until the page says want (after redirects, auto-submitted forms and meta
// refreshes settle) and returns the page's text. Checking again and again is only how a test
// learns that a navigation finished; nothing here waits for time to pass.
func (p *Profile) WaitFor(want string) string {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
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
			loc, _ := chromedp.Run(p.Ctx, chromedp.Location())
			p.T.Fatalf("%s: page at %s never said %q; it says:\n%s", p.Name, loc, want, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Cookies are the browser's cookies for u.
func (p *Profile) Cookies(u string) []*network.Cookie {
	p.T.Helper()
	res, err := chromedp.Call(p.Ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{u}})
	if err != nil {
		p.T.Fatalf("%s: reading cookies: %v", p.Name, err)
	}
	return res.Cookies
}

// Block stops the browser from loading anything under prefix (the person does not open it).
func (p *Profile) Block(prefix string) {
	p.T.Helper()
	_, err := chromedp.Call(p.Ctx, network.SetBlockedURLs, network.SetBlockedURLsParams{
		URLPatterns: []*network.BlockPattern{{URLPattern: prefix + "/*", Block: true}},
	})
	if err != nil {
		p.T.Fatalf("%s: blocking %s: %v", p.Name, prefix, err)
	}
}

// PressAndCapture presses label and returns the first address the browser is sent to that
// starts with prefix.
func (p *Profile) PressAndCapture(label, prefix string) string {
	p.T.Helper()
	return p.Capture(prefix, func() { p.Press(label) })
}

// Capture runs act (a press, a key) and returns the first address the browser is then sent to
// that starts with prefix.
func (p *Profile) Capture(prefix string, act func()) string {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
	defer cancel()
	// Listening starts before act, so the request cannot slip past.
	events := chromedp.Events(ctx, network.RequestWillBeSent)
	act()
	for ev, err := range events {
		if err != nil {
			p.T.Fatalf("%s: waiting for %s: %v", p.Name, prefix, err)
		}
		if strings.HasPrefix(ev.Request.URL, prefix) {
			return ev.Request.URL
		}
	}
	p.T.Fatalf("%s: never sent to %s: %v", p.Name, prefix, ctx.Err())
	return ""
}

// Screenshot saves a full-page PNG as dir/name and returns its path.
func (p *Profile) Screenshot(dir, name string) string {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.T.Fatalf("%s: screenshot: %v", p.Name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.T.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.T.Fatal(err)
	}
	p.T.Logf("screenshot: %s", path)
	return path
}
