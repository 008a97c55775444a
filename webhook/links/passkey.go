package links

import (
	"net/http"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/signin"
)

// needPasskey refuses a link opened by its own person, signed in recently but not with a
// passkey, in a project that requires a phishing-resistant sign-in. A password typed into a
// look-alike page would otherwise be enough to connect an account; a passkey signs only for
// this origin. The page offers the passkey sign-in, which comes back to the link.
func (h *handler) needPasskey(w http.ResponseWriter, p *config.Project, code string, person store.Person) {
	h.env.Pages.Message(w, http.StatusForbidden, pages.MessageData{
		Frame: pages.Frame{
			Title: "Sign in with a passkey to continue", Project: signin.ProjectName(p), SignedInAs: signin.DisplayName(person),
		},
		Heading: "Sign in with a passkey to continue",
		Paragraphs: []string{
			signin.ProjectName(p) + " asks for a sign-in with a passkey before an account is connected. You signed in another way, so nothing has been connected or changed.",
			"Sign in with your passkey and you will come back to this link. If you have no passkey yet, add one on your account page first.",
		},
		Actions: []pages.Action{
			{Label: "Sign in with a passkey", URL: signin.PasskeyURL(p, Path(p, code)), Primary: true},
			{Label: "Your account", URL: signin.DefaultReturn(p)},
		},
	})
}
