package authzdetails

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
)

// FuzzParse: whatever a client sends, Parse either refuses it with an *Error or returns
// details that are canonical (parsing their JSON again gives the same JSON), that cover
// themselves, and whose description holds no control or format character.
func FuzzParse(f *testing.F) {
	ts, err := NewTypes([]Type{
		{Name: "github_repository", Label: "GitHub repository", Actions: []string{"read", "write"}, RequireLocations: true,
			LocationPrefixes: []string{"https://api.github.com/repos/acme/"}},
		{Name: "document", Actions: []string{"read"}, Datatypes: []string{"text"}, Identifier: true},
	})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`[{"type":"github_repository","actions":["read"],"locations":["https://api.github.com/repos/acme/api"]}]`,
		`[{"type":"document","actions":["read","read"],"datatypes":["text"],"identifier":"d-1"}]`,
		`[{"type":"document","actions":["read"],"identifier":"a\u202eb"}]`,
		`[{"type":"github_repository","actions":["read"],"locations":["https://api.github.com/repos/acme/%2e%2e/x"]}]`,
		`[{"type":"document","Actions":["read"],"actions":["read"]}]`,
		`[]`, `{}`, `[null]`, `[1]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		ds, err := Parse(ts, raw)
		if err != nil {
			if !IsInvalid(err) {
				t.Fatalf("Parse(%q) error %v is not an *Error", raw, err)
			}
			return
		}
		out := Marshal(ds)
		again, err := Parse(ts, out)
		if err != nil || Marshal(again) != out {
			t.Fatalf("canonical form %s parses to %v, %v", out, again, err)
		}
		if !Covers(ds, ds) {
			t.Fatalf("%s does not cover itself", out)
		}
		for _, line := range Describe(ts, ds, PrinterFunc(fmt.Sprintf)) {
			if strings.IndexFunc(line, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }) >= 0 {
				t.Fatalf("description %q has a control or format character", line)
			}
		}
	})
}
