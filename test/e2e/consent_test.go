package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/internal/testbrowser"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/register"
)

// consentShots is where the consent page's screenshots go; docs/screenshots holds a copy made
// with LATCHKEY_SCREENSHOTS=docs/screenshots.
var consentShots = func() string {
	if d := os.Getenv("LATCHKEY_SCREENSHOTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "latchkey-screenshots")
}()

const consentRefusal = "This organisation only allows recognised apps to connect"

func consentRegister(t *testing.T, h *stack.Stack, name string, redirects ...string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"client_name": name, "redirect_uris": redirects, "token_endpoint_auth_method": "none",
		"grant_types": []string{"authorization_code", "refresh_token"},
	})
	resp, err := http.Post(h.Issuer+"/register", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		ClientID string `json:"client_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("registering %s: %d %v", name, resp.StatusCode, err)
	}
	return out.ClientID
}

func consentAuthorizeURL(h *stack.Stack, clientID, redirect string) string {
	return h.Issuer + "/authorize?" + url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {redirect}, "scope": {"openid profile email"},
		"state": {"s1"}, "code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"},
		"prompt": {"consent"},
	}.Encode()
}

// The consent page (docs/recognised-apps.md) in a real browser, in both states: a recognised agent
// callback, and someone's website with the warning and the tick box. What a person sees first is
// where access goes; the app's name comes after, as a claim; and Allow sends nothing useful until
// the box is ticked — in the page and, when the page is tampered with, on the server.
func TestConsentPageInChromium(t *testing.T) {
	testbrowser.Chromium(t)
	h := stack.New(t, stack.Options{Audit: true, FrontHost: "127.0.0.1"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	attacker := "https://claude-ai.evil.example/api/mcp/auth_callback"
	claude := consentRegister(t, h, "Claude", "https://claude.ai/api/mcp/auth_callback")
	phish := consentRegister(t, h, "Claude", attacker)

	alice := testbrowser.New(t, ctx, "alice's browser")
	alice.Do(chromedp.EmulateViewport(720, 900))
	alice.Open(h.Issuer + "/sign-in")
	alice.Fill("username", stack.AliceEmail)
	alice.Fill("password", stack.AlicePassword)
	alice.Press("Sign in")
	alice.WaitFor("Your account")

	// "Where access goes" comes before the app's name in the document, and the address is shown
	// in full.
	leadsWithWhere := `(() => {
		const where = document.getElementById("where"), name = document.querySelector(".app-name");
		return !!where && !!name && (where.compareDocumentPosition(name) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0;
	})()`

	t.Run("recognised Claude callback", func(t *testing.T) {
		alice.T = t
		alice.Open(consentAuthorizeURL(h, claude, "https://claude.ai/api/mcp/auth_callback"))
		text := alice.WaitFor("Where access goes")
		if !testbrowser.Eval[bool](alice, leadsWithWhere) {
			t.Error(`"Where access goes" must come before the app's name`)
		}
		for _, want := range []string{"Access goes to Claude", "https://claude.ai/api/mcp/auth_callback", "The app calls itself “Claude”"} {
			if !strings.Contains(text, want) {
				t.Errorf("page does not say %q:\n%s", want, text)
			}
		}
		if testbrowser.Eval[bool](alice, `document.getElementById("confirm_destination") !== null`) {
			t.Error("a recognised callback needs no tick box")
		}
		alice.Screenshot(consentShots, "consent-recognised.png")
	})

	t.Run("unrecognised website", func(t *testing.T) {
		alice.T = t
		alice.Open(consentAuthorizeURL(h, phish, attacker))
		text := alice.WaitFor("does not recognise")
		if !testbrowser.Eval[bool](alice, leadsWithWhere) {
			t.Error(`"Where access goes" must come before the app's name`)
		}
		for _, want := range []string{attacker, "I set up this connection and expected access to go to " + attacker, "The app calls itself “Claude”"} {
			if !strings.Contains(text, want) {
				t.Errorf("page does not say %q:\n%s", want, text)
			}
		}
		if !testbrowser.Eval[bool](alice, `document.querySelector('label[for="confirm_destination"]') !== null`) {
			t.Error("the tick box has no label")
		}
		alice.Screenshot(consentShots, "consent-website.png")

		// In the page: Allow does not submit while the box is unticked.
		submits := `(() => {
			const form = document.querySelector("form.decide"), allow = document.getElementById("allow");
			let fired = false;
			const stop = e => { fired = true; e.preventDefault(); };
			form.addEventListener("submit", stop);
			form.requestSubmit(allow);
			form.removeEventListener("submit", stop);
			return fired;
		})()`
		if testbrowser.Eval[bool](alice, submits) {
			t.Error("Allow submitted without the tick box")
		}
		alice.Press("Allow")
		if !testbrowser.Eval[bool](alice, `document.getElementById("confirm_destination").matches(":invalid")`) || !strings.HasPrefix(alice.Location(), h.Issuer+"/authorize?") {
			t.Errorf("after Allow without the box the browser is at %s", alice.Location())
		}

		// On the server: a page stripped of the browser's check still gets no code.
		testbrowser.Eval[bool](alice, `(() => { document.getElementById("confirm_destination").removeAttribute("required"); return true; })()`)
		alice.Press("Allow")
		text = alice.WaitFor("Tick the box")
		if loc := alice.Location(); strings.HasPrefix(loc, "https://claude-ai.evil.example") || strings.Contains(loc, "code=") {
			t.Errorf("a code left without the tick box: %s", loc)
		}
		if !strings.Contains(text, attacker) {
			t.Error("the page shown again lost the address")
		}
		alice.Screenshot(consentShots, "consent-website-unticked.png")
		person := h.Person(stack.AliceEmail)
		if _, err := h.Store().GetGrant(context.Background(), stack.ProjectKey, person.ID, phish); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("consent stored without the tick box: %v", err)
		}

		// Ticked, Allow sends access where the person said they expected it to go.
		alice.Block("https://claude-ai.evil.example")
		alice.Do(chromedp.Click(chromedp.ID("confirm_destination")))
		got := alice.PressAndCapture("Allow", attacker+"?")
		if u, _ := url.Parse(got); u.Query().Get("code") == "" {
			t.Errorf("no code after ticking: %s", got)
		}
	})

	t.Run("client described by a metadata document", func(t *testing.T) {
		alice.T = t
		var doc atomic.Pointer[[]byte]
		site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(*doc.Load())
		}))
		defer site.Close()
		id := site.URL + "/oauth/client.json"
		b, _ := json.Marshal(map[string]any{
			"client_id": id, "client_name": "Claude Code", "client_uri": "https://claude.ai/",
			"redirect_uris": []string{"http://127.0.0.1/callback"}, "token_endpoint_auth_method": "none",
		})
		doc.Store(&b)
		pool := x509.NewCertPool()
		pool.AddCert(site.Certificate())
		h.Server().Env().ClientDocument = register.ClientDocument(clientdoc.New(clientdoc.Options{AllowLoopback: true, RootCAs: pool, Now: h.Clock.Now}))
		p := *h.Project
		p.Registration.ClientIDMetadataDocuments = true
		h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 2})
		alice.Open(consentAuthorizeURL(h, id, "http://127.0.0.1:53682/callback"))
		text := alice.WaitFor("vouches for it")
		if !testbrowser.Eval[bool](alice, leadsWithWhere) || !strings.Contains(text, "Access goes to an app on this device") ||
			!strings.Contains(text, strings.TrimPrefix(site.URL, "https://")+" vouches for it") {
			t.Errorf("document client:\n%s", text)
		}
		alice.Screenshot(consentShots, "consent-document.png")
	})

	t.Run("only recognised apps", func(t *testing.T) {
		alice.T = t
		p := *h.Project
		p.Redirects = config.DefaultRedirectRules()
		p.Redirects.OnlyRecognisedApps = true
		h.Holder().Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: &p}, Version: 3})
		alice.Open(consentAuthorizeURL(h, phish, attacker))
		text := alice.WaitFor(consentRefusal)
		if !strings.Contains(text, attacker) || strings.Contains(text, "Allow") {
			t.Errorf("refusal page:\n%s", text)
		}
		alice.Screenshot(consentShots, "consent-refused.png")
	})
}
