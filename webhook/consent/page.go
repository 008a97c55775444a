package consent

import (
	"net/http"
	"net/url"

	"latchkey.dev/latchkey/internal/authzdetails"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/redirect"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// scopeWords describes the scopes every project knows; others are shown by name.
var scopeWords = map[string]string{
	"openid":         "confirm who you are",
	"profile":        "see your name",
	"email":          "see your email address",
	"offline_access": "keep access while you are away",
}

// consentPage is the one place the consent page is put together. It leads with where access
// goes (the one fact a client cannot fake), then who is asking — the app's name as its own
// claim — then what it asks for.
func (a *authorizer) consentPage(w http.ResponseWriter, r *http.Request, p *config.Project, req *request, person store.Person, status int, problem string) {
	c := req.Client
	name := c.Name
	if name == "" {
		name = c.ID
	}
	d := pages.ConsentData{
		Frame:       pages.Frame{Title: "Allow access?", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
		Action:      site.IssuerPath(p) + "/authorize",
		CSRF:        signin.CSRFToken(a.env, r),
		Request:     req.echo(),
		AppName:     name,
		AppURI:      httpsOnly(c.URI),
		ClientID:    c.ID,
		Registered:  c.Registered,
		Vouched:     c.Vouched,
		Destination: a.env.Destination(p, req.To),
		Resources:   req.Resources,
		Details: authzdetails.Describe(p.AuthorizationDetails, req.Details, authzdetails.PrinterFunc(func(k string, a ...any) string {
			return pages.T(w, k, a...)
		})),
		Error: problem,
	}
	for _, s := range req.Scopes {
		words := scopeWords[s]
		if words != "" {
			words = pages.T(w, words)
		}
		d.Scopes = append(d.Scopes, pages.Scope{Name: s, Description: words})
	}
	if src := formSource(req.To); src != "" {
		pages.AllowFormTargets(w, src)
	}
	a.env.Pages.Consent(w, status, d)
}

func httpsOnly(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return ""
	}
	return s
}

// Destination is "where access goes" for the consent page, from internal/redirect's
// classification under the project's rules: a recognised agent callback by its name, an
// address on the person's own device as such, and any other website with a warning and the
// tick box, which the decision POST enforces.
func Destination(p *config.Project, redirectURI string) pages.Destination {
	c := redirect.Classify(redirectURI, p.Redirects)
	switch c.Kind {
	case redirect.Agent:
		return pages.Destination{URI: redirectURI, Kind: pages.DestinationRecognised, Name: c.Name}
	case redirect.Device:
		return pages.Destination{URI: redirectURI, Kind: pages.DestinationDevice, Name: c.Name}
	default:
		return pages.Destination{URI: redirectURI, Kind: pages.DestinationWebsite, ConfirmRequired: true}
	}
}
