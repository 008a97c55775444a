package pages

import "net/http"

// The connection pages (the callback's confirmation page and the account page) register themselves
// here rather than in pages.go, so the flows that own them can add pages without editing the
// core's list. Package-level variables are initialised before init runs, so New sees the full
// list.
func init() {
	pageNames = append(pageNames, "connect_confirm", "account")
}

// ConnectConfirmData is the page a connector callback stops at when it arrives in a browser
// that did not start the connection, or in any browser not signed in as the person
// who started it. It may be seen by someone who is not that person, so it names the receiving
// person only by a masked address.
type ConnectConfirmData struct {
	Frame
	// Service is the connector's display name ("GitHub").
	Service string
	// Account is the masked account that will receive the connection ("a***@example.com").
	Account string
	// Action is the callback address the form posts to.
	Action string
	// Code and State echo the callback; Token is the one-time confirmation token. Iss echoes
	// the callback's iss, if it had one, so that a sign-in the POST asks for comes back to a
	// callback that passes the issuer check again.
	Code, State, Token, Iss string
	// SignIn, when set, is the project's sign-in page: the browser must sign in as Account
	// (again, with Again) before the connection can finish, and the page offers that instead of
	// the confirmation form. ReturnTo is where sign-in comes back to.
	SignIn, ReturnTo string
	Again            bool
	// Passkey asks for a sign-in with a passkey: the project requires a phishing-resistant
	// sign-in, and the browser's is not one.
	Passkey bool
}

// ConnectConfirm renders the confirmation page.
func (p *Pages) ConnectConfirm(w http.ResponseWriter, status int, d ConnectConfirmData) {
	if d.Title == "" {
		d.Title = "Finish this connection?"
	}
	// No switcher: coming back to the callback's address would not find the connection again.
	// The page follows the browser's Accept-Language.
	p.frame(w, status, &d.Frame, switchNone)
	p.render(w, status, "connect_confirm", d)
}

// AccountData is the signed-in person's account page.
type AccountData struct {
	Frame
	CSRF string
	// Notice reports the outcome of the last action.
	Notice string
	// Form actions.
	ConnectAction, DisconnectAction, RemoveAgentAction, RevokeAppAction string
	// DefaultAction makes a connection the person's default for its connector.
	DefaultAction string
	Connections   []AccountConnection
	// Available are connectors the person has not connected yet.
	Available []AccountConnector
	// Another are connectors the person has connected, for connecting a further account.
	Another []AccountConnector
	Apps    []AccountApp
	SignOut string
	// PasskeysOffered shows the passkeys section: the person's passkeys with a Remove form
	// each, and an Add button the page's script runs (PasskeyOptions, then PasskeyAdd).
	PasskeysOffered                           bool
	Passkeys                                  []AccountPasskey
	PasskeyOptions, PasskeyAdd, PasskeyRemove string
	// Approvals is the person's "Waiting for you" page (docs/approvals.md); Waiting how many
	// agents' requests wait there for them.
	Approvals string
	Waiting   int
}

// AccountPasskey is one of the person's passkeys.
type AccountPasskey struct {
	ID              string // credential ID, base64url
	Name            string
	Added, LastUsed string
}

// AccountConnection is one connected account, named as the service names it.
type AccountConnection struct {
	ID string
	// Service is the connector's display name, Connector its key.
	Service, Connector string
	// AccountName is the account's name at the service (the GitHub login).
	AccountName string
	ConnectedAt string
	// State is the connection's state (docs/connection-health.md): active, expiring,
	// needs_reconnect or revoked_upstream; the page says it in words.
	State string
	// Broken: only reconnecting can make it work again (needs_reconnect, revoked_upstream).
	Broken bool
	// Default: the person's default account at the service; CanBeDefault offers to make it so.
	Default, CanBeDefault bool
	Agents                []AccountAgent
}

// AccountAgent is an agent allowed to use a connection.
type AccountAgent struct{ ClientID, Name string }

// AccountConnector is a service the person can connect.
type AccountConnector struct{ Key, Service string }

// AccountApp is an app the person has authorised.
type AccountApp struct {
	ClientID, Name string
	Since          string
}

// Account renders the account page.
func (p *Pages) Account(w http.ResponseWriter, status int, d AccountData) {
	if d.Title == "" {
		d.Title = "Your account"
	}
	d.Notice = translate(Printer(LanguageOf(w)), d.Notice)
	p.frame(w, status, &d.Frame)
	p.render(w, status, "account", d)
}
