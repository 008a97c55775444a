package pages

import "net/http"

// The connect link page (docs/connections-for-agents.md) is parsed with the others at start-up.
func init() { pageNames = append(pageNames, "link") }

// LinkAccount is a connected account the person may let the agent use.
type LinkAccount struct {
	// ID is the connection's id, posted back as connection_id.
	ID string
	// Name is how the service names the account (the GitHub login).
	Name    string
	Checked bool
}

// LinkData is step 5 of a connect link: what the link was made for.
type LinkData struct {
	Frame
	Heading string
	// Kind is "connect", "allow" or "reconnect".
	Kind string
	// Service names the connected service ("GitHub").
	Service string
	// Agent names the app the link is for; AgentRegistered says that name is only the app's
	// own claim (a dynamically registered client).
	Agent           string
	AgentRegistered bool
	// Accounts are the person's working accounts at Service, for Kind "allow".
	Accounts []LinkAccount
	// Broken names the account that stopped working, for Kind "reconnect", when known.
	Broken string
	// Account is the account the agent named (its name or id at the service), "" for none:
	// an allow link offers that account only, a connect link asks for it.
	Account string
	// Form targets, each a POST carrying CSRF as csrf_token.
	ConnectAction string
	AllowAction   string
	DeclineAction string
	CSRF          string
	// Error is shown above the form (for example when no account was chosen).
	Error string
	// APIKey: the service is connected by pasting a key on Latchkey's page, not by approving
	// access at the service, so the page does not ask which account is signed in there.
	APIKey bool
}

// Link renders the connect link page.
func (p *Pages) Link(w http.ResponseWriter, status int, d LinkData) {
	if d.Title == "" {
		d.Title = d.Heading
	}
	pr := Printer(LanguageOf(w))
	d.Heading = translate(pr, d.Heading)
	d.Error = translate(pr, d.Error)
	p.frame(w, status, &d.Frame)
	p.render(w, status, "link", d)
}
