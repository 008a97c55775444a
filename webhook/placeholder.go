package webhook

import (
	"net/http"

	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
	"latchkey.dev/latchkey/webhook/site"
)

// accountPlaceholder stands in for the account page (a later flow) so that sign-in has
// somewhere to return to.
func (s *Server) accountPlaceholder(w http.ResponseWriter, r *http.Request) {
	p := site.Project(r)
	_, person, ok := signin.Require(s.env, w, r, r.URL.RequestURI())
	if !ok {
		return
	}
	s.env.Pages.Message(w, http.StatusOK, pages.MessageData{
		Frame:      pages.Frame{Title: "Your account", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person)},
		Heading:    "You are signed in",
		Paragraphs: []string{"You can close this window and go back to your app."},
		Actions: []pages.Action{{
			Label: "Sign out", URL: site.IssuerPath(p) + "/sign-out", Post: true,
			Fields: []pages.Field{{Name: "csrf_token", Value: signin.CSRFToken(s.env, r)}},
		}},
	})
}

// projectHome sends the issuer's own address to the account page.
func (s *Server) projectHome(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, site.IssuerPath(site.Project(r))+"/account", http.StatusFound)
}

func pagesForbidden() pages.ErrorData {
	return pages.ErrorData{
		Frame:   pages.Frame{Title: "Request refused"},
		Message: "This request came from another site, so it was refused. Go back to the page and try again.",
	}
}
