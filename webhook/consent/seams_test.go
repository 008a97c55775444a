package consent_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/pages"
)

// The seams internal/redirect plugs into: the destination shown on the consent page (with a tick box
// the server enforces) and the redirect policy checked at consent.
func TestConsentSeams(t *testing.T) {
	t.Parallel()
	s := stack.New(t, stack.Options{})
	b := s.Browser()
	b.SignInPage("", stack.AliceEmail, stack.AlicePassword)
	env := s.Server().Env()

	t.Run("tick box enforced by the server", func(t *testing.T) {
		env.Destination = func(_ *config.Project, uri string) pages.Destination {
			return pages.Destination{URI: uri, Kind: pages.DestinationWebsite, ConfirmRequired: true}
		}
		const tick = "I set up this connection and expected access to go to"
		p := b.MustGet(s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", stack.NewPKCE(), nil))
		allow, ok := p.FindForm("Allow")
		if !ok || !p.HasField(tick) {
			t.Fatalf("no tick box:\n%s", p.Text())
		}
		d, err := b.Submit(allow)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != http.StatusBadRequest || d.Header.Get("Location") != "" {
			t.Errorf("Allow without the tick box: %d %q", d.Status, d.Header.Get("Location"))
		}
		if err := allow.Check(tick); err != nil {
			t.Fatal(err)
		}
		if got := allow.Fields.Get("confirm_destination"); got != stack.WebRedirect {
			t.Errorf("the tick box sends confirm_destination=%q, want the redirect URI", got)
		}
		d, err = b.Submit(allow)
		if err != nil {
			t.Fatal(err)
		}
		if loc, _ := url.Parse(d.Location()); d.Status != http.StatusSeeOther || loc.Query().Get("code") == "" {
			t.Errorf("Allow with the tick box: %d %q", d.Status, d.Location())
		}
	})

	t.Run("recognised destination reads as what it is", func(t *testing.T) {
		env.Destination = func(_ *config.Project, uri string) pages.Destination {
			return pages.Destination{URI: uri, Kind: pages.DestinationRecognised, Name: "Claude"}
		}
		p := b.MustGet(s.AuthorizeURL(stack.Web, stack.WebRedirect, "write", stack.NewPKCE(), nil))
		text := p.Text()
		where := strings.Index(text, "Where access goes")
		who := strings.Index(text, "Who is asking")
		if where < 0 || who < where || !strings.Contains(text, "Access goes to Claude") || !strings.Contains(p.Body, "<strong>Claude</strong>") {
			t.Errorf("consent page must lead with where access goes:\n%s", text)
		}
	})

	t.Run("policy refuses at consent with a page", func(t *testing.T) {
		env.RedirectPolicy = func(*config.Project, []string) error {
			return errors.New("This organisation only allows recognised apps to connect")
		}
		defer func() { env.RedirectPolicy = func(*config.Project, []string) error { return nil } }()
		p := b.MustGet(s.AuthorizeURL(stack.Web, stack.WebRedirect, "read", stack.NewPKCE(), nil))
		if p.Status != http.StatusForbidden || p.Header.Get("Location") != "" || !strings.Contains(p.Text(), "only allows recognised apps") {
			t.Errorf("%d %q", p.Status, p.Header.Get("Location"))
		}
	})
}
