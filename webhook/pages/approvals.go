package pages

import "net/http"

// The approvals page registers itself, as the connection pages do (connect.go).
func init() { pageNames = append(pageNames, "approvals") }

// ApprovalsData is the person's "Waiting for you" page: what agents asked them to approve
// (docs/approvals.md), and the agents they blocked from asking.
type ApprovalsData struct {
	Frame
	CSRF   string
	Notice string
	// Decide is where Approve and Deny post; Block and Unblock where those post.
	Decide, Block, Unblock string
	Back                   string // the account page
	Requests               []ApprovalRequest
	Blocked                []ApprovalAgent
}

// ApprovalRequest is one request waiting for the person. Every text in it is the agent's or
// the administrator's, shown as text: a binding message with markup shows the markup.
type ApprovalRequest struct {
	ID string
	// Agent is the client's name, ClientID its id.
	Agent, ClientID string
	// Where says where access goes: to the agent directly, over the back channel, and for a
	// ping client the host Latchkey tells when the person answered.
	NotifyHost string
	// Message is the binding message, which the agent shows too, so the person can tell its
	// request from another.
	Message string
	// Scopes and Details say what the agent asks for, in words.
	Scopes  []string
	Details []string
	Expires string
}

// ApprovalAgent is an agent the person blocked.
type ApprovalAgent struct{ ClientID, Name string }

// Approvals renders the approvals page.
func (p *Pages) Approvals(w http.ResponseWriter, status int, d ApprovalsData) {
	if d.Title == "" {
		d.Title = "Waiting for you"
	}
	d.Notice = translate(Printer(LanguageOf(w)), d.Notice)
	p.frame(w, status, &d.Frame)
	p.render(w, status, "approvals", d)
}
