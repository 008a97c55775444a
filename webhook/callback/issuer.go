package callback

import (
	"errors"
	"net/http"
	"net/url"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/upstream"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

// checkIssuer applies RFC 9207 to a response arriving at a connector's callback, before any
// state is looked at: iss, where the service sends it, must be the connector's issuer, and a
// service whose metadata promises iss must send it. A response that fails is refused and
// nothing is consumed; the attempt expires on its own. It reports whether the request may go on.
func (h *handler) checkIssuer(w http.ResponseWriter, r *http.Request, p *config.Project, q url.Values) bool {
	c := p.Connectors[pathConnector(r)]
	if c == nil {
		// No such connector: lookup answers as for any unknown state.
		return true
	}
	iss, present := q["iss"]
	var value string
	if present {
		value = iss[0]
	}
	err := upstream.CheckIssuer(r.Context(), h.http, c, value, present)
	if err == nil {
		return true
	}
	reason := "wrong_issuer"
	if !errors.Is(err, upstream.ErrIssuer) {
		reason = "issuer_unknown"
	}
	status, code := upstream.Status(err)
	h.env.Log(r.Context()).Info("upstream authorization response refused", "project", p.Key, "connector", c.Key, "reason", reason,
		"upstream_status", status, "upstream_error", code)
	if reason == "wrong_issuer" {
		h.page(w, p, http.StatusBadRequest, "This connection cannot be finished",
			pages.T(w, "The answer did not come from the %s this connection was started with. Nothing was connected. Start again from your account page, or ask the agent for a new link.", serviceName(c)))
		return false
	}
	h.page(w, p, http.StatusBadGateway, pages.T(w, "%s did not complete the connection", serviceName(c)),
		"Nothing was connected. Start again from your account page, or ask the agent for a new link.")
	return false
}

// legacy answers the callback every connector of a project used to share. Only an attempt in
// flight when the server was upgraded, or a service still registered with the old address,
// sends anyone here; neither can be finished safely, since the old address does not say which
// connector the code is for.
func (h *handler) legacy(w http.ResponseWriter, r *http.Request) {
	headers(w)
	p := site.Project(r)
	h.env.Log(r.Context()).Info("upstream callback at the old shared address; register each connector's status.callbackURL at its service", "project", p.Key)
	h.page(w, p, http.StatusBadRequest, "This connection cannot be finished",
		"The service sent you back to an address this server no longer uses. Nothing was connected. Start again from your account page, or ask the agent for a new link. If it happens again, tell whoever runs this project that the service needs the connector's new callback address.")
}
