package webhook

import (
	"net/http"
	"strings"

	"latchkey.dev/latchkey/internal/requestid"
	"latchkey.dev/latchkey/webhook/oauth"
	"latchkey.dev/latchkey/webhook/pages"
	"latchkey.dev/latchkey/webhook/site"
)

// router implements site.Router on one ServeMux that holds only per-project routes, so flow
// patterns never conflict with the server-wide ones. New registers every flow and hands the
// router to nobody afterwards, so the routes are fixed once the server is built; a pattern
// registered twice panics there (http.ServeMux), at start-up.
type router struct {
	mux  *http.ServeMux
	base string
	s    *Server

	preflight map[string]bool // paths whose OPTIONS route is registered
}

func newRouter(s *Server, base string) *router {
	rt := &router{mux: http.NewServeMux(), base: base, s: s, preflight: map[string]bool{}}
	// Anything under a project that no flow handles: the same 404 page as everything else.
	rt.mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.env.Pages.NotFound(w) }))
	return rt
}

// split turns an issuer-relative pattern into a method and a full path pattern.
func (rt *router) split(pattern string) (method, path string) {
	path = pattern
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		method, path = pattern[:i], strings.TrimLeft(pattern[i+1:], " \t")
	}
	if !strings.HasPrefix(path, "/") {
		panic("webhook: pattern " + pattern + " must start with /")
	}
	return method, rt.base + "/{ns}/{project}" + path
}

func (rt *router) add(pattern string, h http.Handler) {
	method, path := rt.split(pattern)
	if method != "" {
		path = method + " " + path
	}
	rt.mux.Handle(path, h)
}

func (rt *router) Page(pattern string, h http.Handler) { rt.add(pattern, rt.page(h)) }

func (rt *router) API(pattern string, h http.Handler) {
	rt.add(pattern, rt.api(h))
	method, path := rt.split(pattern)
	if method == "" || method == http.MethodOptions {
		return
	}
	if !rt.preflight[path] {
		rt.preflight[path] = true
		rt.mux.Handle("OPTIONS "+path, rt.api(http.NotFoundHandler()))
	}
}

// page resolves the project (HTML 404 when unknown) and applies cross-origin protection to
// every non-safe request.
func (rt *router) page(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := rt.s.project(r)
		if p == nil {
			rt.s.env.Pages.NotFound(w)
			return
		}
		// The Project's own look reaches every page rendered to w (docs/branding.md).
		w = pages.Branded(w, site.IssuerPath(p), &p.Branding)
		// And its language: the switcher's cookie, else Accept-Language, else the Project's
		// default (docs/languages.md).
		w = pages.Localized(w, r, site.IssuerPath(p), p.DefaultLanguage)
		if err := rt.s.cop.Check(r); err != nil {
			rt.s.env.Pages.Error(w, http.StatusForbidden, pagesForbidden())
			return
		}
		h.ServeHTTP(w, site.WithProject(r, p))
	})
}

// api resolves the project (JSON 404 when unknown) and opens CORS: these endpoints use no
// cookies, so any origin may call them (browser-based OAuth clients and MCP inspectors do).
func (rt *router) api(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd["Access-Control-Allow-Origin"] = anyOrigin
		// A browser-based client may read the id to quote it (internal/requestid).
		hd["Access-Control-Expose-Headers"] = exposeRequestID
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			hd.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
			hd.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, MCP-Protocol-Version")
			hd.Set("Access-Control-Max-Age", "3600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		p := rt.s.project(r)
		if p == nil {
			oauth.WriteError(w, oauth.ErrNotFound)
			return
		}
		h.ServeHTTP(w, site.WithProject(r, p))
	})
}

// The CORS headers of every API answer, one slice each for all of them (see pages.NoStore).
var (
	anyOrigin       = []string{"*"}
	exposeRequestID = []string{requestid.Header}
)

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
