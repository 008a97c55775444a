package stack

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Pages are read the way a browser and its accessibility tree read them: the document is parsed
// (golang.org/x/net/html, the HTML5 parsing algorithm), a form is found by the accessible name of
// its submit button (the button's text, its aria-label or aria-labelledby, an input's value), a
// field by its label (a <label for>, a wrapping <label>, aria-label), a link by its text, and a
// form is submitted with exactly the controls a browser would send. A test that reads the page
// this way breaks when a person could no longer find the button, not when markup is reordered.

// Doc parses the page's body.
func (p Page) Doc() *html.Node {
	n, err := html.Parse(strings.NewReader(p.Body))
	if err != nil { // html.Parse fails only on a failing reader
		return &html.Node{Type: html.DocumentNode}
	}
	return n
}

// Form is one form of a page, filled in as far as the page filled it in.
type Form struct {
	// Action is the form's action as written (the page's own address when absent); Method is
	// GET or POST.
	Action, Method string
	// Fields are the controls a browser would submit: named inputs with their values
	// (checkboxes and radios only when checked), selects' chosen options, textareas, and the
	// pressed button's name and value.
	Fields url.Values

	node *html.Node
	page Page
}

// FindForm returns the form holding the submit button whose accessible name contains button,
// as pressing that button would submit it.
func (p Page) FindForm(button string) (*Form, bool) {
	doc := p.Doc()
	var found *Form
	walk(doc, func(n *html.Node) bool {
		if found != nil || !isSubmit(n) || !strings.Contains(accessibleName(doc, n), button) {
			return found == nil
		}
		f := formOf(n)
		if f == nil {
			return true
		}
		found = newForm(p, f)
		if name := attr(n, "name"); name != "" {
			found.Fields.Set(name, attr(n, "value"))
		}
		return false
	})
	return found, found != nil
}

// Form finds the form whose submit button says label and returns its action and the fields
// pressing that button would send.
func (p Page) Form(label string) (action string, fields url.Values, ok bool) {
	f, ok := p.FindForm(label)
	if !ok {
		return "", nil, false
	}
	return f.Action, f.Fields, true
}

// Forms are every form of the page, as submitted without pressing a named button.
func (p Page) Forms() []*Form {
	var out []*Form
	walk(p.Doc(), func(n *html.Node) bool {
		if n.DataAtom == atom.Form {
			out = append(out, newForm(p, n))
		}
		return true
	})
	return out
}

// Buttons are the accessible names of the page's submit buttons, in document order.
func (p Page) Buttons() []string {
	doc := p.Doc()
	var out []string
	walk(doc, func(n *html.Node) bool {
		if isSubmit(n) {
			out = append(out, accessibleName(doc, n))
		}
		return true
	})
	return out
}

// Hidden returns the hidden fields of all the page's forms (the last one wins for a name).
func (p Page) Hidden() url.Values {
	v := url.Values{}
	walk(p.Doc(), func(n *html.Node) bool {
		if n.DataAtom == atom.Input && strings.EqualFold(attr(n, "type"), "hidden") && attr(n, "name") != "" {
			v.Set(attr(n, "name"), attr(n, "value"))
		}
		return true
	})
	return v
}

// Link returns the address of the first link whose accessible name contains label.
func (p Page) Link(label string) (string, bool) {
	doc := p.Doc()
	href, found := "", false
	walk(doc, func(n *html.Node) bool {
		if n.DataAtom == atom.A && hasAttr(n, "href") && strings.Contains(accessibleName(doc, n), label) {
			href, found = attr(n, "href"), true
		}
		return !found
	})
	return href, found
}

// Continue is the address a <meta http-equiv="refresh"> sends the browser on to, or "".
func (p Page) Continue() string {
	var to string
	walk(p.Doc(), func(n *html.Node) bool {
		if n.DataAtom == atom.Meta && strings.EqualFold(attr(n, "http-equiv"), "refresh") {
			_, u, ok := strings.Cut(attr(n, "content"), ";")
			if ok {
				u = strings.TrimSpace(u)
				if k, v, ok := strings.Cut(u, "="); ok && strings.EqualFold(strings.TrimSpace(k), "url") {
					to = strings.Trim(strings.TrimSpace(v), `'"`)
				}
			}
		}
		return to == ""
	})
	return to
}

// Text is the page as a reader sees it: the text of the body, outside scripts and styles,
// with white space collapsed; inline elements do not split words.
func (p Page) Text() string {
	var b strings.Builder
	var body *html.Node
	walk(p.Doc(), func(n *html.Node) bool {
		if n.DataAtom == atom.Body {
			body = n
		}
		return body == nil
	})
	if body == nil {
		return ""
	}
	textOf(&b, body)
	return strings.Join(strings.Fields(b.String()), " ")
}

// HasField says whether the page has a form control labelled label.
func (p Page) HasField(label string) bool {
	doc := p.Doc()
	return control(doc, doc, label) != nil
}

// Set fills in the control labelled label (by <label for>, a wrapping <label>, aria-label or,
// failing those, its placeholder).
func (f *Form) Set(label, value string) error {
	c := control(f.page.Doc(), f.node, label)
	if c == nil {
		return fmt.Errorf("no field labelled %q in the form", label)
	}
	f.Fields.Set(attr(c, "name"), value)
	return nil
}

// Check ticks the checkbox labelled label.
func (f *Form) Check(label string) error {
	c := control(f.page.Doc(), f.node, label)
	if c == nil || !strings.EqualFold(attr(c, "type"), "checkbox") {
		return fmt.Errorf("no checkbox labelled %q in the form", label)
	}
	f.Fields.Set(attr(c, "name"), attr(c, "value"))
	return nil
}

// Submit sends f as the browser would: POST forms as a form post of the same origin, GET forms
// as a navigation.
func (b *Browser) Submit(f *Form) (Page, error) {
	action := f.Action
	if u, err := url.Parse(f.page.URL); err == nil && f.page.URL != "" {
		if a, err := u.Parse(action); err == nil {
			action = a.String()
		}
	}
	if f.Method == http.MethodGet {
		u, err := url.Parse(action)
		if err != nil {
			return f.page, err
		}
		u.RawQuery = f.Fields.Encode()
		return b.Get(u.String())
	}
	return b.Post(action, f.Fields)
}

// ---------------------------------------------------------------------------------------------

func newForm(p Page, n *html.Node) *Form {
	f := &Form{Action: attr(n, "action"), Method: http.MethodPost, Fields: url.Values{}, node: n, page: p}
	if !strings.EqualFold(attr(n, "method"), "post") {
		f.Method = http.MethodGet
	}
	if !hasAttr(n, "action") {
		f.Action = p.URL
	}
	walk(n, func(c *html.Node) bool {
		name := attr(c, "name")
		if name == "" || hasAttr(c, "disabled") {
			return true
		}
		switch c.DataAtom {
		case atom.Input:
			switch strings.ToLower(attr(c, "type")) {
			case "submit", "button", "image", "reset", "file":
			case "checkbox", "radio":
				if hasAttr(c, "checked") {
					f.Fields.Add(name, valueOr(c, "on"))
				}
			default:
				f.Fields.Add(name, attr(c, "value"))
			}
		case atom.Textarea:
			f.Fields.Add(name, textContent(c))
		case atom.Select:
			if v, ok := selected(c); ok {
				f.Fields.Add(name, v)
			}
		}
		return true
	})
	return f
}

func selected(sel *html.Node) (string, bool) {
	var first, chosen *html.Node
	walk(sel, func(n *html.Node) bool {
		if n.DataAtom != atom.Option {
			return true
		}
		if first == nil {
			first = n
		}
		if hasAttr(n, "selected") && chosen == nil {
			chosen = n
		}
		return true
	})
	if chosen == nil {
		chosen = first
	}
	if chosen == nil {
		return "", false
	}
	if hasAttr(chosen, "value") {
		return attr(chosen, "value"), true
	}
	return strings.Join(strings.Fields(textContent(chosen)), " "), true
}

func isSubmit(n *html.Node) bool {
	switch n.DataAtom {
	case atom.Button:
		t := strings.ToLower(attr(n, "type"))
		return t == "" || t == "submit"
	case atom.Input:
		t := strings.ToLower(attr(n, "type"))
		return t == "submit" || t == "image"
	}
	return false
}

// formOf is the form a control belongs to: its form attribute's, else its nearest form.
func formOf(n *html.Node) *html.Node {
	if id := attr(n, "form"); id != "" {
		return byID(root(n), id)
	}
	for p := n.Parent; p != nil; p = p.Parent {
		if p.DataAtom == atom.Form {
			return p
		}
	}
	return nil
}

// accessibleName is the name assistive technology announces for n (the parts of the
// accessible name computation these pages use): aria-labelledby, aria-label, a label, a
// submit input's value or alt, else the element's text.
func accessibleName(doc, n *html.Node) string {
	if ids := attr(n, "aria-labelledby"); ids != "" {
		var parts []string
		for _, id := range strings.Fields(ids) {
			if l := byID(doc, id); l != nil {
				parts = append(parts, textContent(l))
			}
		}
		return collapse(strings.Join(parts, " "))
	}
	if l := strings.TrimSpace(attr(n, "aria-label")); l != "" {
		return l
	}
	if n.DataAtom == atom.Input {
		switch strings.ToLower(attr(n, "type")) {
		case "submit":
			return valueOr(n, "Submit")
		case "image":
			return attr(n, "alt")
		}
		if l := labelFor(doc, n); l != "" {
			return l
		}
		return attr(n, "placeholder")
	}
	if n.DataAtom == atom.Select || n.DataAtom == atom.Textarea {
		return labelFor(doc, n)
	}
	return collapse(textContent(n))
}

// labelFor is the text of the <label> naming control n: one whose for is its id, or one that
// wraps it.
func labelFor(doc, n *html.Node) string {
	if id := attr(n, "id"); id != "" {
		var l string
		walk(doc, func(c *html.Node) bool {
			if c.DataAtom == atom.Label && attr(c, "for") == id {
				l = collapse(textContent(c))
			}
			return l == ""
		})
		if l != "" {
			return l
		}
	}
	for p := n.Parent; p != nil; p = p.Parent {
		if p.DataAtom == atom.Label {
			return collapse(textContent(p))
		}
	}
	return ""
}

// control is the first named form control under scope whose accessible name contains label.
func control(doc, scope *html.Node, label string) *html.Node {
	var found *html.Node
	walk(scope, func(n *html.Node) bool {
		switch n.DataAtom {
		case atom.Input, atom.Select, atom.Textarea:
			if attr(n, "name") != "" && !isSubmit(n) && strings.Contains(accessibleName(doc, n), label) {
				found = n
			}
		}
		return found == nil
	})
	return found
}

// walk visits n and its descendants in document order while visit returns true.
func walk(n *html.Node, visit func(*html.Node) bool) bool {
	if !visit(n) {
		return false
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if !walk(c, visit) {
			return false
		}
	}
	return true
}

func textContent(n *html.Node) string {
	var b strings.Builder
	textOf(&b, n)
	return b.String()
}

// inline elements do not split words; every other element's text stands apart from its
// neighbours'.
var inline = map[atom.Atom]bool{
	atom.A: true, atom.Abbr: true, atom.B: true, atom.Code: true, atom.Em: true, atom.I: true,
	atom.Kbd: true, atom.Label: true, atom.Small: true, atom.Span: true, atom.Strong: true,
	atom.Sub: true, atom.Sup: true, atom.Time: true, atom.U: true, atom.Var: true, atom.Samp: true,
}

func textOf(b *strings.Builder, n *html.Node) {
	switch {
	case n.Type == html.TextNode:
		b.WriteString(n.Data)
		return
	case n.Type == html.ElementNode && (n.DataAtom == atom.Script || n.DataAtom == atom.Style || n.DataAtom == atom.Template):
		return
	}
	block := n.Type == html.ElementNode && !inline[n.DataAtom]
	if block {
		b.WriteByte(' ')
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		textOf(b, c)
	}
	if block {
		b.WriteByte(' ')
	}
}

func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return true
		}
	}
	return false
}

func valueOr(n *html.Node, def string) string {
	if hasAttr(n, "value") {
		return attr(n, "value")
	}
	return def
}

func root(n *html.Node) *html.Node {
	for n.Parent != nil {
		n = n.Parent
	}
	return n
}

func byID(doc *html.Node, id string) *html.Node {
	var found *html.Node
	walk(doc, func(n *html.Node) bool {
		if n.Type == html.ElementNode && attr(n, "id") == id {
			found = n
		}
		return found == nil
	})
	return found
}

// CheckboxValue is what ticking the checkbox labelled label would send (its value), and
// whether the page has such a box.
func (p Page) CheckboxValue(label string) (string, bool) {
	doc := p.Doc()
	c := control(doc, doc, label)
	if c == nil || !strings.EqualFold(attr(c, "type"), "checkbox") {
		return "", false
	}
	return valueOr(c, "on"), true
}
