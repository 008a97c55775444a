package pages

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/text/feature/plural"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/message/catalog"
)

// Every sentence a person reads on a page comes from a message catalog (docs/languages.md,
// docs/decisions/0046). The catalogs are JSON files, one per language, keyed by the English
// text; the English file lists every key, and a test keeps the others complete. Templates call
// T (escaped text) or TH (a trusted translation with markup, its arguments escaped); Go code
// that builds a sentence from parts calls T(w, …); plain English strings a handler puts in a
// page's fields (Title, Heading, Message, Paragraphs, Error, Notice, an Action's Label) are
// translated when the page is rendered, so a handler needs no change to show a fixed sentence.
//
// Machine-facing text (OAuth error_description, logs, audit records) stays English.

//go:embed locales/*.json
var localeFS embed.FS

// LanguageCookie remembers the language a person chose with the switcher.
const LanguageCookie = "lang"

// SwitchPath is where, under an issuer, the language switcher's links go.
const SwitchPath = "/language"

// languages are the shipped languages, English first: it is the fallback.
var languages = []struct {
	Tag  language.Tag
	Name string // the language's name in itself, as the switcher shows it
}{
	{language.English, "English"},
	{language.German, "Deutsch"},
	{language.French, "Français"},
}

var (
	messages = catalog.NewBuilder(catalog.Fallback(language.English))
	// keys are the English keys of every message (the English catalog's).
	keys    = map[string]bool{}
	tags    []language.Tag
	matcher language.Matcher
)

// pluralMessage is a catalog entry that depends on a count: the first argument, a %d.
type pluralMessage struct {
	One   string `json:"one"`
	Other string `json:"other"`
}

func init() {
	for _, l := range languages {
		tags = append(tags, l.Tag)
		m, err := loadCatalog(l.Tag)
		if err != nil {
			panic(err) // embedded files, checked by tests
		}
		for k, v := range m {
			if l.Tag == language.English {
				keys[k] = true
			}
			if err := setMessage(l.Tag, k, v); err != nil {
				panic(fmt.Sprintf("pages: %s: %q: %v", l.Tag, k, err))
			}
		}
	}
	matcher = language.NewMatcher(tags)
}

func loadCatalog(tag language.Tag) (map[string]json.RawMessage, error) {
	b, err := localeFS.ReadFile("locales/" + tag.String() + ".json")
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("pages: locales/%s.json: %w", tag, err)
	}
	return m, nil
}

func setMessage(tag language.Tag, key string, raw json.RawMessage) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return messages.SetString(tag, key, s)
	}
	var p pluralMessage
	if err := json.Unmarshal(raw, &p); err != nil || p.One == "" || p.Other == "" {
		return fmt.Errorf("neither a string nor {one, other}")
	}
	return messages.Set(tag, key, plural.Selectf(1, "%d", "one", p.One, "other", p.Other))
}

// Supported reports whether tag names a shipped language ("en", "de", "fr").
func Supported(tag string) bool {
	for _, l := range languages {
		if l.Tag.String() == tag {
			return true
		}
	}
	return false
}

// Choose picks the language of a page: the switcher's cookie, then the browser's
// Accept-Language, then fallback (the Project's default language, "" for English).
func Choose(r *http.Request, fallback string) language.Tag {
	if c, err := r.Cookie(LanguageCookie); err == nil && Supported(c.Value) {
		return language.Make(c.Value)
	}
	if al := r.Header.Get("Accept-Language"); al != "" {
		if want, _, err := language.ParseAcceptLanguage(al); err == nil && len(want) > 0 {
			if _, i, conf := matcher.Match(want...); conf > language.No {
				return tags[i]
			}
		}
	}
	if Supported(fallback) {
		return language.Make(fallback)
	}
	return language.English
}

// Printer formats messages in tag (English when tag is not shipped).
func Printer(tag language.Tag) *message.Printer {
	return message.NewPrinter(tag, message.Catalog(messages))
}

// Sprintf formats the catalog message key in the language lang ("de"); the token-exchange
// refusal uses it for its connect_message in the Project's default language.
func Sprintf(lang, key string, args ...any) string {
	tag := language.English
	if Supported(lang) {
		tag = language.Make(lang)
	}
	return Printer(tag).Sprintf(key, args...)
}

type localWriter struct {
	http.ResponseWriter
	tag language.Tag
	// switchPath and switchFull are the switcher's address with return_to set to the page's
	// path, or its path and query; "" when the page has no address to come back to (it answers
	// a form POST).
	switchPath, switchFull string
}

// How much of its own address a page's switcher comes back to. Most pages come back to their
// path only: a page must not repeat text from its query string (a crafted link could put words
// on it), and the one 404 page must be the same for every address. The sign-in and consent
// pages come back to their full address: they carry their request in the query, and already
// hold it in their form.
type switchMode int

const (
	switchPath switchMode = iota
	switchFull
	switchNone
)

func (lw *localWriter) Unwrap() http.ResponseWriter { return lw.ResponseWriter }

// Localized returns w carrying the language of the pages rendered to it, chosen for r
// (Choose). issuerPath is the Project's issuer path: the switcher's links go to
// issuerPath+SwitchPath and come back to the page's own address. A page answering a form POST
// has no address a GET could come back to, so it shows no switcher; the next page does.
func Localized(w http.ResponseWriter, r *http.Request, issuerPath, fallback string) http.ResponseWriter {
	lw := &localWriter{ResponseWriter: w, tag: Choose(r, fallback)}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		base := issuerPath + SwitchPath + "?return_to="
		lw.switchPath = base + url.QueryEscape(r.URL.EscapedPath()) + "&lang="
		lw.switchFull = base + url.QueryEscape(r.URL.RequestURI()) + "&lang="
	}
	return lw
}

func localOf(w http.ResponseWriter) *localWriter {
	for w != nil {
		if lw, ok := w.(*localWriter); ok {
			return lw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// LanguageOf is the language pages rendered to w are in.
func LanguageOf(w http.ResponseWriter) language.Tag {
	if lw := localOf(w); lw != nil {
		return lw.tag
	}
	return language.English
}

// T formats the catalog message key in the language of w, for a sentence a handler builds
// from parts ("Connect your %s account").
func T(w http.ResponseWriter, key string, args ...any) string {
	return Printer(LanguageOf(w)).Sprintf(key, args...)
}

// Translate returns the translation, in the language of w, of a fixed English sentence from
// the catalog, or s unchanged when it is not one (for a script's messages, see JSONError).
func Translate(w http.ResponseWriter, s string) string { return translate(Printer(LanguageOf(w)), s) }

// translate returns the translation of a fixed English sentence, or s unchanged when it is not
// a catalog key (a sentence already translated with T, or a name).
func translate(pr *message.Printer, s string) string {
	if s == "" || !keys[s] || strings.Contains(s, "%") {
		return s
	}
	return pr.Sprintf(s)
}

// LanguageLink is one entry of the language switcher.
type LanguageLink struct {
	Tag, Name, URL string
	Current        bool
}

func switcher(lw *localWriter, cur language.Tag, mode switchMode) []LanguageLink {
	if lw == nil || mode == switchNone {
		return nil
	}
	to := lw.switchPath
	if mode == switchFull {
		to = lw.switchFull
	}
	if to == "" {
		return nil
	}
	out := make([]LanguageLink, 0, len(languages))
	for _, l := range languages {
		out = append(out, LanguageLink{Tag: l.Tag.String(), Name: l.Name, URL: to + l.Tag.String(), Current: l.Tag == cur})
	}
	return out
}

// langFuncs are the template functions of one language: T escapes like any other text; TH is
// for a catalog sentence with markup (<strong>, <code>): the translation is trusted, being
// ours, and every argument is escaped before it goes in.
func langFuncs(tag language.Tag) template.FuncMap {
	pr := Printer(tag)
	return template.FuncMap{
		"T": func(key string, args ...any) string { return pr.Sprintf(key, args...) },
		"TH": func(key string, args ...any) template.HTML {
			esc := make([]any, len(args))
			for i, a := range args {
				esc[i] = template.HTMLEscapeString(fmt.Sprint(a))
			}
			return template.HTML(pr.Sprintf(key, esc...)) //nolint:gosec // G203: the format is our own catalog message; every argument was escaped above
		},
	}
}

// SwitchLanguage answers the switcher's links: it remembers the chosen language in a cookie and
// sends the browser back to the page it came from. return_to must be a path on this server
// under the Project's issuer path; anything else (another host, "//host", a backslash, a
// scheme) sends the browser to the Project's home instead, so the switcher is never an open
// redirect. Changing the language needs no anti-forgery token: a forged link can only change
// the language of a person's pages, which the switcher on every page changes back.
func SwitchLanguage(issuerPath, cookiePath string, secure bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lang := r.URL.Query().Get("lang"); Supported(lang) {
			http.SetCookie(w, &http.Cookie{
				Name: LanguageCookie, Value: lang, Path: cookiePath, MaxAge: 365 * 24 * 3600,
				HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode,
			})
		}
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, SafeReturn(r.URL.Query().Get("return_to"), issuerPath), http.StatusSeeOther)
	})
}

// SafeReturn is to when it is a same-origin path under issuerPath, else issuerPath + "/".
func SafeReturn(to, issuerPath string) string {
	home := issuerPath + "/"
	if len(to) > 2048 || !strings.HasPrefix(to, home) || strings.ContainsAny(to, "\\\r\n\t") {
		return home
	}
	u, err := url.Parse(to)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, home) || strings.Contains(u.Path, "//") {
		return home
	}
	// A path with dot segments could climb out of the issuer once the browser resolves it.
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return home
		}
	}
	return to
}
