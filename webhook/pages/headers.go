package pages

import (
	"net/http"
	"strings"
)

// CSP is the content security policy of every response. Pages load only the same-origin
// stylesheet and images, so no page makes the browser tell another server who is looking (a
// self-registered client's logo_uri is never loaded, docs/decisions/0022); forms post only to
// this server; no page can be framed.
const CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Headers sets the security headers on every response. With noStore, responses are also never
// cached: everything under an issuer carries a code, a token or a person's data, or might.
func Headers(noStore bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Security-Policy"] = cspValue
		h["X-Content-Type-Options"] = nosniffValue
		h["Referrer-Policy"] = noReferrerValue
		h["X-Frame-Options"] = denyValue
		if noStore {
			NoStore(h)
		}
		next.ServeHTTP(w, r)
	})
}

// NoStore marks a response as never to be cached.
func NoStore(h http.Header) {
	h["Cache-Control"] = noStoreValue
	h["Pragma"] = noCacheValue
}

// The values of the headers every response carries, made once: Header.Set makes a new
// one-element slice for each, a dozen allocations a request for the same few strings. A shared
// slice is safe because nothing changes a header value in place: Set replaces the slice, Add
// appends to a full one (and so copies it), and net/http copies the map before it writes it.
// Keys are in canonical form, as Set would make them.
var (
	cspValue        = []string{CSP}
	nosniffValue    = []string{"nosniff"}
	noReferrerValue = []string{"no-referrer"}
	denyValue       = []string{"DENY"}
	noStoreValue    = []string{"no-store"}
	noCacheValue    = []string{"no-cache"}
)

// AllowFormTargets widens form-action for this response only. A form whose POST is answered
// with a redirect to another origin (consent → the client's redirect URI) is otherwise blocked
// by browsers that apply form-action to redirects.
func AllowFormTargets(w http.ResponseWriter, sources ...string) {
	if len(sources) == 0 {
		return
	}
	extra := strings.Join(sources, " ")
	w.Header().Set("Content-Security-Policy",
		strings.Replace(CSP, "form-action 'self'", "form-action 'self' "+extra, 1))
}

// AllowScripts lets this response's page run the same-origin scripts it links to and call
// back to this server (passkey ceremonies). Inline scripts stay refused.
func AllowScripts(w http.ResponseWriter) {
	h := w.Header()
	csp := h.Get("Content-Security-Policy")
	if csp == "" {
		csp = CSP
	}
	if strings.Contains(csp, "script-src") {
		return
	}
	h.Set("Content-Security-Policy", strings.Replace(csp, "default-src 'none';", "default-src 'none'; script-src 'self'; connect-src 'self';", 1))
}
