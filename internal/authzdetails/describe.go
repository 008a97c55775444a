package authzdetails

import "strings"

// Printer formats a catalog message in a person's language. The keys below are in
// webhook/pages/locales; a page passes PrinterFunc wrapping pages.T.
type Printer interface {
	Sprintf(key string, args ...any) string
}

// PrinterFunc makes a function a Printer:
// authzdetails.PrinterFunc(func(k string, a ...any) string { return pages.T(w, k, a...) }).
type PrinterFunc func(key string, args ...any) string

// Sprintf calls f.
func (f PrinterFunc) Sprintf(key string, args ...any) string { return f(key, args...) }

// The sentences Describe builds a line from (catalog keys: English text).
var (
	msgDetailAt      = "%s at %s"
	msgDetailActions = "may: %s"
	msgDetailData    = "data: %s"
	msgDetailID      = "identifier: %s"
)

// Describe says what each detail allows, one line per detail, in the language of p: the type's
// label, where, which actions, which datatypes, which identifier ("GitHub repository at
// https://api.github.com/repos/acme/api — may: read, write"). The lines are plain text, never
// markup: a page must escape them like any other text (html/template does). Every value in
// them passed Validate, so they hold no control or direction-changing characters. A detail of
// a type ts does not declare (no longer) is shown by its type name.
func Describe(ts Types, ds []Detail, p Printer) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		label := d.Type
		if t, ok := ts.Lookup(d.Type); ok && t.Label != "" {
			label = t.Label
		}
		head := label
		if len(d.Locations) > 0 {
			head = p.Sprintf(msgDetailAt, label, strings.Join(d.Locations, ", "))
		}
		var parts []string
		if len(d.Actions) > 0 {
			parts = append(parts, p.Sprintf(msgDetailActions, strings.Join(d.Actions, ", ")))
		}
		if len(d.Datatypes) > 0 {
			parts = append(parts, p.Sprintf(msgDetailData, strings.Join(d.Datatypes, ", ")))
		}
		if d.Identifier != "" {
			parts = append(parts, p.Sprintf(msgDetailID, d.Identifier))
		}
		if len(parts) > 0 {
			head += " — " + strings.Join(parts, "; ")
		}
		out = append(out, head)
	}
	return out
}
