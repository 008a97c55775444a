package links

import (
	"net/http"

	"latchkey.dev/latchkey/internal/store"
	"latchkey.dev/latchkey/webhook/apikey"
)

// keyOptions are the key form's for link o: it posts back to the link, and the saved
// connection closes the link and lets its agent use it (Hook).
func keyOptions(o *opened) apikey.FormOptions {
	base := Path(o.p, o.code)
	return apikey.FormOptions{
		Action: base + "/api-key", Back: base, Reconnect: o.link.Kind == store.LinkReconnect,
		Agent: AgentName(o.agent), LinkID: o.link.ID,
	}
}

// keyPage is the key form of an API-key connector, after checks 1 to 4: only the link's own
// person, signed in recently, sees it.
func (h *handler) keyPage(w http.ResponseWriter, r *http.Request) {
	o, ok := h.check(w, r)
	if !ok {
		return
	}
	if o.connector.APIKey == nil {
		h.env.Pages.NotFound(w)
		return
	}
	h.keys.Form(w, r, o.p, o.connector, o.person, keyOptions(o))
}

// keyPost runs checks 1 to 4 and the form token again, then checks and saves the key. Another
// person's browser never gets past check 3, so nothing it pastes is sent anywhere.
func (h *handler) keyPost(w http.ResponseWriter, r *http.Request) {
	o, form, ok := h.form(w, r)
	if !ok {
		return
	}
	if o.connector.APIKey == nil {
		h.env.Pages.NotFound(w)
		return
	}
	conn, ok := h.keys.Save(w, r, o.p, o.connector, o.person, form.Get(apikey.Field), keyOptions(o))
	if !ok {
		return
	}
	h.done(w, o, accountName(conn))
}
