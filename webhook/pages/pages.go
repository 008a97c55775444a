// Package pages renders every HTML page the server shows a person. Templates are embedded,
// parsed once when the server starts (a missing or broken template stops start-up), and each
// page has one typed render method. Security headers for all responses come from Headers.
package pages

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	"latchkey.dev/latchkey/internal/requestid"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Pages holds the parsed templates.
type Pages struct {
	static string
	// t holds each page's template in each shipped language, by language tag then page name.
	t map[string]map[string]*template.Template
}

var pageNames = []string{"signin", "consent", "error", "message"}

// New parses every template. staticPrefix is the URL path the stylesheet is served under
// ("/-/static/").
func New(staticPrefix string) (*Pages, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("pages: layout: %w", err)
	}
	p := &Pages{static: staticPrefix, t: map[string]map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("pages: %s: %w", name, err)
		}
		if t.Lookup("content") == nil {
			return nil, fmt.Errorf("pages: %s defines no content", name)
		}
		// One copy per language, its T and TH bound to that language's catalog.
		for _, l := range languages {
			lt, err := t.Clone()
			if err != nil {
				return nil, fmt.Errorf("pages: %s: %w", name, err)
			}
			if p.t[l.Tag.String()] == nil {
				p.t[l.Tag.String()] = map[string]*template.Template{}
			}
			p.t[l.Tag.String()][name] = lt.Funcs(langFuncs(l.Tag))
		}
	}
	return p, nil
}

var funcs = template.FuncMap{
	"join": strings.Join,
	// Replaced in each language's copy (langFuncs); these let the templates parse.
	"T":  func(key string, args ...any) string { return key },
	"TH": func(key string, args ...any) template.HTML { return "" },
}

// Static serves the embedded stylesheet and images.
func (p *Pages) Static() http.Handler {
	sub, _ := fs.Sub(staticFS, "static")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// Frame is what every page shows around its content.
type Frame struct {
	// Title is the page title (also its main heading unless the page sets its own).
	Title string
	// Project is the project's display name.
	Project string
	// SignedInAs names the signed-in person, if any.
	SignedInAs string

	static    string
	brand     Brand
	requestID string
	lang      string
	languages []LanguageLink
}

// Lang is the page's language, a BCP 47 tag for <html lang>.
func (f Frame) Lang() string {
	if f.lang == "" {
		return "en"
	}
	return f.lang
}

// Languages are the switcher's links, none on a page that answers a form POST.
func (f Frame) Languages() []LanguageLink { return f.languages }

// Static is the stylesheet's path prefix (set by the render methods).
func (f Frame) Static() string { return f.static }

// Brand is the Project's own look, from the writer the page is rendered to (Branded).
func (f Frame) Brand() Brand { return f.brand }

// RequestID is the id a person quotes when asking for help, shown on pages that answer with an
// error status (set by the render methods).
func (f Frame) RequestID() string { return f.requestID }

// frame fills in what every page gets from the server rather than from its handler: the
// stylesheet's prefix and, on an error status, the request's id, read from the X-Request-Id
// header the server set on w before the handler ran (internal/requestid), so that no handler
// has to pass it along.
func (p *Pages) frame(w http.ResponseWriter, status int, f *Frame, mode ...switchMode) {
	f.static = p.static
	lw := localOf(w)
	tag := LanguageOf(w)
	f.lang = tag.String()
	m := switchPath
	if len(mode) > 0 {
		m = mode[0]
	}
	f.languages = switcher(lw, tag, m)
	f.Title = translate(Printer(tag), f.Title)
	if status >= 400 {
		f.requestID = w.Header().Get(requestid.Header)
	}
}

// Field is a hidden form field.
type Field struct{ Name, Value string }

// Action is a button on a page: a link (GET) or a small form (POST).
type Action struct {
	// Label is the visible text; it says what the button does.
	Label   string
	URL     string
	Post    bool
	Fields  []Field
	Primary bool
}

// SignInData is the sign-in page.
type SignInData struct {
	Frame
	Action    string // form action
	ReturnTo  string
	CSRF      string
	Username  string // prefilled after a failed attempt
	Error     string // shown above the form
	Passwords bool   // show the password form
	OIDCURL   string // start of upstream sign-in, "" when none
	OIDCLabel string
	// PasswordsUnavailable and OIDCUnavailable say that a way to sign in the project uses is
	// off for now (its Secret is missing or broken); the page says so instead of offering it.
	PasswordsUnavailable bool
	OIDCUnavailable      bool
	// Again says the person must sign in again (prompt=login, max_age, a stale sign-in).
	Again bool
	// Recent says the page behind ReturnTo needs a recent sign-in: the upstream provider is
	// asked for one (max_age) and its auth_time is checked.
	Recent bool
	// Passkeys offers signing in with a passkey (the page's script asks PasskeyOptions and
	// posts the browser's answer to PasskeyFinish). PasskeyRequired says the page behind
	// ReturnTo needs a passkey sign-in, so the other ways in are not offered.
	Passkeys        bool
	PasskeyOptions  string
	PasskeyFinish   string
	PasskeyRequired bool
}

// SignIn renders the sign-in page.
func (p *Pages) SignIn(w http.ResponseWriter, status int, d SignInData) {
	if d.Title == "" {
		d.Title = "Sign in"
	}
	pr := Printer(LanguageOf(w))
	d.Error = translate(pr, d.Error)
	d.OIDCLabel = translate(pr, d.OIDCLabel)
	p.frame(w, status, &d.Frame, switchFull)
	p.render(w, status, "signin", d)
}

// DestinationKind says what kind of place an authorization code goes to.
type DestinationKind int

const (
	// DestinationWebsite is any other website: the person is warned.
	DestinationWebsite DestinationKind = iota
	// DestinationRecognised is a callback the project recognises by name (Claude, ChatGPT, …).
	DestinationRecognised
	// DestinationDevice is an app on the person's own device (loopback or an app's scheme).
	DestinationDevice
)

// Destination is "where access goes" on the consent page.
type Destination struct {
	// URI is the redirect address, shown in full.
	URI  string
	Kind DestinationKind
	// Name is what a recognised destination is called ("Claude").
	Name string
	// ConfirmRequired asks for the tick box before Allow works (enforced by the server too).
	ConfirmRequired bool
}

// Scope is one requested scope with words for people.
type Scope struct{ Name, Description string }

// ConsentData is the consent page.
type ConsentData struct {
	Frame
	Action string
	CSRF   string
	// Request echoes the authorization request back on submit.
	Request []Field
	// AppName is what the client calls itself; Registered says that name (and the home page)
	// are only the client's claims, shown as such. There is no logo: a self-registered
	// client's logo_uri would be fetched by the person's browser and tell its server who is
	// looking (docs/decisions/0022).
	AppName    string
	AppURI     string
	ClientID   string
	Registered bool
	// Vouched names the domain that serves the client's metadata document, if any; ClientID
	// is then the document's address.
	Vouched     string
	Destination Destination
	Scopes      []Scope
	Resources   []string
	// Details say in words what the request's authorization_details (RFC 9396) allow, one
	// line per detail (internal/authzdetails.Describe): plain text, escaped like any other.
	Details []string
	// Error is shown above the buttons (for example when the tick box was not ticked).
	Error string
}

// Consent renders the consent page.
func (p *Pages) Consent(w http.ResponseWriter, status int, d ConsentData) {
	if d.Title == "" {
		d.Title = "Allow access?"
	}
	d.Error = translate(Printer(LanguageOf(w)), d.Error)
	p.frame(w, status, &d.Frame, switchFull)
	p.render(w, status, "consent", d)
}

// ErrorData is an error page.
type ErrorData struct {
	Frame
	Heading string
	Message string

	noSwitch bool
}

// Error renders an error page.
func (p *Pages) Error(w http.ResponseWriter, status int, d ErrorData) {
	if d.Title == "" {
		d.Title = http.StatusText(status)
	}
	if d.Heading == "" {
		d.Heading = d.Title
	}
	pr := Printer(LanguageOf(w))
	d.Heading = translate(pr, d.Heading)
	d.Message = translate(pr, d.Message)
	mode := switchPath
	if d.noSwitch {
		mode = switchNone
	}
	p.frame(w, status, &d.Frame, mode)
	p.render(w, status, "error", d)
}

// NotFound renders the one 404 page; it is identical for every unknown thing so that it says
// nothing about what exists.
func (p *Pages) NotFound(w http.ResponseWriter) {
	p.Error(w, http.StatusNotFound, ErrorData{
		Frame:   Frame{Title: "Not found"},
		Message: "There is nothing at this address. If someone gave you this link, it may have expired or been replaced.",
		// The same page for every address: no switcher that would name it.
		noSwitch: true,
	})
}

// MessageData is a page that tells the person something, with optional buttons.
type MessageData struct {
	Frame
	Heading    string
	Paragraphs []string
	Actions    []Action
	// Continue, when set, sends the browser on to this same-site URL at once (meta refresh)
	// and shows it as a link. Used after a form POST, where a redirect to another origin
	// would be blocked by form-action 'self'.
	Continue string
}

// Message renders a message page.
func (p *Pages) Message(w http.ResponseWriter, status int, d MessageData) {
	if d.Heading == "" {
		d.Heading = d.Title
	}
	pr := Printer(LanguageOf(w))
	d.Heading = translate(pr, d.Heading)
	paras := make([]string, len(d.Paragraphs))
	for i, s := range d.Paragraphs {
		paras[i] = translate(pr, s)
	}
	d.Paragraphs = paras
	actions := make([]Action, len(d.Actions))
	for i, a := range d.Actions {
		a.Label = translate(pr, a.Label)
		actions[i] = a
	}
	d.Actions = actions
	p.frame(w, status, &d.Frame)
	p.render(w, status, "message", d)
}

func (p *Pages) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	lang := LanguageOf(w).String()
	if err := p.t[lang][name].ExecuteTemplate(&buf, "layout", framed(w, data)); err != nil {
		// Only a programming error gets here; templates are checked by tests.
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Language", lang)
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
