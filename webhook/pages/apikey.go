package pages

import "net/http"

// The API-key page registers itself, as the connection pages do (connect.go).
func init() {
	pageNames = append(pageNames, "apikey")
}

// APIKeyData is the page a person pastes an API key on to connect a service that issues keys
// instead of OAuth (docs/api-key-connectors.md). The key is never put back on the page: a
// refused key leaves the field empty.
type APIKeyData struct {
	Frame
	// Heading is the page's heading, already in the page's language.
	Heading string
	// Service is the connector's display name.
	Service string
	// Hint is the connector's own text on where to make a key; plain text.
	Hint string
	// Agent, when the page was reached from a connect link, is the agent that may use the
	// account once it is connected.
	Agent string
	// Action is where the form posts; Back where Cancel leads.
	Action, Back string
	CSRF         string
	// Error says why the last key was not saved, already in the page's language.
	Error string
}

// APIKey renders the API-key page.
func (p *Pages) APIKey(w http.ResponseWriter, status int, d APIKeyData) {
	if d.Title == "" {
		d.Title = d.Heading
	}
	p.frame(w, status, &d.Frame, switchNone)
	p.render(w, status, "apikey", d)
}
