package authzdetails

import (
	"fmt"
	"strings"
	"testing"
)

func testTypes(t *testing.T) Types {
	t.Helper()
	ts, err := NewTypes([]Type{
		{Name: "github_repository", Label: "GitHub repository", Connector: "team-a/github",
			Actions: []string{"write", "read"}, RequireLocations: true,
			LocationPrefixes: []string{"https://api.github.com/repos/acme"}},
		{Name: "payment_initiation", Label: "Payment", Actions: []string{"initiate", "status"},
			Datatypes: []string{"amount"}, Identifier: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestParseAcceptsDeclaredTypesInCanonicalForm(t *testing.T) {
	ds, err := Parse(testTypes(t), ` [{"type":"github_repository","actions":["write","read","read"],
		"locations":["https://api.github.com/repos/acme/api"]},
		{"type":"payment_initiation","actions":["initiate"],"identifier":"inv-42","datatypes":["amount"]}] `)
	if err != nil {
		t.Fatal(err)
	}
	got := Marshal(ds)
	want := `[{"type":"github_repository","locations":["https://api.github.com/repos/acme/api"],"actions":["read","write"]},` +
		`{"type":"payment_initiation","actions":["initiate"],"datatypes":["amount"],"identifier":"inv-42"}]`
	if got != want {
		t.Fatalf("Marshal = %s\nwant %s", got, want)
	}
	back, err := Unmarshal(got)
	if err != nil || Marshal(back) != got {
		t.Fatalf("Unmarshal(Marshal) = %v, %v", back, err)
	}
	if ds, err := Parse(testTypes(t), ""); ds != nil || err != nil {
		t.Fatalf("empty parameter: %v, %v", ds, err)
	}
}

// TestParseRefuses: every way a client can send something the Project did not declare, or
// that could not be shown or compared safely, is an invalid_authorization_details refusal.
func TestParseRefuses(t *testing.T) {
	ts := testTypes(t)
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	gh := func(loc string) string {
		return `[{"type":"github_repository","actions":["read"],"locations":[` + fmt.Sprintf("%q", loc) + `]}]`
	}
	for name, raw := range map[string]string{
		"undeclared type":         `[{"type":"account_information","actions":["read"]}]`,
		"no type":                 `[{"actions":["read"]}]`,
		"not an array":            `{"type":"github_repository"}`,
		"empty array":             `[]`,
		"entry not an object":     `["github_repository"]`,
		"null entry":              `[null]`,
		"trailing data":           gh("https://api.github.com/repos/acme/api") + `[]`,
		"unknown field":           `[{"type":"payment_initiation","actions":["initiate"],"instructedAmount":{"amount":"1"}}]`,
		"privileges not declared": `[{"type":"payment_initiation","actions":["initiate"],"privileges":["admin"]}]`,
		"field in other case":     `[{"type":"payment_initiation","Actions":["initiate"]}]`,
		"action not declared":     `[{"type":"github_repository","actions":["admin"],"locations":["https://api.github.com/repos/acme/api"]}]`,
		"actions missing":         `[{"type":"github_repository","locations":["https://api.github.com/repos/acme/api"]}]`,
		"actions wrong type":      `[{"type":"github_repository","actions":"read","locations":["https://api.github.com/repos/acme/api"]}]`,
		"actions null":            `[{"type":"payment_initiation","actions":null}]`,
		"datatypes not declared":  `[{"type":"github_repository","actions":["read"],"datatypes":["x"],"locations":["https://api.github.com/repos/acme/api"]}]`,
		"identifier not declared": `[{"type":"github_repository","actions":["read"],"identifier":"x","locations":["https://api.github.com/repos/acme/api"]}]`,
		"identifier with newline": `[{"type":"payment_initiation","actions":["initiate"],"identifier":"a\nb"}]`,
		"identifier with bidi":    `[{"type":"payment_initiation","actions":["initiate"],"identifier":"inv\u202e24"}]`,
		"locations required":      `[{"type":"github_repository","actions":["read"]}]`,
		"location outside prefix": gh("https://api.github.com/repos/other/api"),
		"location sibling prefix": gh("https://api.github.com/repos/acme-evil/api"),
		"location dot segments":   gh("https://api.github.com/repos/acme/../other/api"),
		"location encoded dots":   gh("https://api.github.com/repos/acme/%2e%2e/other/api"),
		"location encoded slash":  gh("https://api.github.com/repos/acme%2Fx/api"),
		"location with userinfo":  gh("https://api.github.com@evil.example/repos/acme/api"),
		"location with query":     gh("https://api.github.com/repos/acme/api?x=1"),
		"location with fragment":  gh("https://api.github.com/repos/acme/api#x"),
		"location with backslash": gh(`https://api.github.com/repos/acme\..\other`),
		"location with markup":    gh(`https://api.github.com/repos/acme/<script>`),
		"too many details":        "[" + many(MaxDetails+1, func(int) string { return `{"type":"payment_initiation","actions":["status"]}` }) + "]",
		"too many locations":      `[{"type":"github_repository","actions":["read"],"locations":[` + many(MaxValues+1, func(i int) string { return fmt.Sprintf(`"https://api.github.com/repos/acme/r%d"`, i) }) + `]}]`,
		"longer than MaxBytes":    `[{"type":"payment_initiation","actions":["status"],"identifier":"` + strings.Repeat("a", MaxBytes) + `"}]`,
		"identifier too long":     `[{"type":"payment_initiation","actions":["status"],"identifier":"` + strings.Repeat("a", MaxValueLength+1) + `"}]`,
		"not UTF-8":               "[{\"type\":\"payment_initiation\",\"actions\":[\"status\"],\"identifier\":\"\xff\"}]",
	} {
		t.Run(name, func(t *testing.T) {
			ds, err := Parse(ts, raw)
			if err == nil || !IsInvalid(err) {
				t.Fatalf("Parse accepted %s: %v (err %v)", raw, ds, err)
			}
			if len(err.Error()) > 300 {
				t.Errorf("description is %d bytes long; it must not echo the input", len(err.Error()))
			}
		})
	}
}

// TestMarkupLocationAcceptedWhereNoPrefixRestricts: a location of an unrestricted type may
// still hold characters that are markup in HTML; Describe returns them as text for the page to
// escape, and the JSON stays JSON.
func TestLocationsWithoutPrefixMustBeHTTPS(t *testing.T) {
	ts, err := NewTypes([]Type{{Name: "files", RequireLocations: true}})
	if err != nil {
		t.Fatal(err)
	}
	for raw, ok := range map[string]bool{
		`[{"type":"files","locations":["https://files.example/a"]}]`: true,
		`[{"type":"files","locations":["http://files.example/a"]}]`:  false,
		`[{"type":"files","locations":["files.example/a"]}]`:         false,
		`[{"type":"files","locations":["mailto:a@files.example"]}]`:  false,
	} {
		if _, err := Parse(ts, raw); (err == nil) != ok {
			t.Errorf("Parse(%s): err %v, want accepted %v", raw, err, ok)
		}
	}
}

func TestNewTypesRefusesBadDeclarations(t *testing.T) {
	for name, decls := range map[string][]Type{
		"twice":            {{Name: "a"}, {Name: "a"}},
		"bad name":         {{Name: "a b"}},
		"action with bidi": {{Name: "a", Actions: []string{"re\u202ead"}}},
		"prefix no scheme": {{Name: "a", LocationPrefixes: []string{"api.github.com/repos"}}},
		"prefix query":     {{Name: "a", LocationPrefixes: []string{"https://x.example/?a"}}},
	} {
		if _, err := NewTypes(decls); err == nil {
			t.Errorf("%s: NewTypes accepted %v", name, decls)
		}
	}
	ts := testTypes(t)
	if got := ts.Names(); strings.Join(got, ",") != "github_repository,payment_initiation" {
		t.Errorf("Names = %v", got)
	}
	if !ts.Governs("team-a/github") || ts.Governs("team-b/github") {
		t.Error("Governs does not follow the declared connector")
	}
}

func mustParse(t *testing.T, ts Types, raw string) []Detail {
	t.Helper()
	ds, err := Parse(ts, raw)
	if err != nil {
		t.Fatalf("Parse(%s): %v", raw, err)
	}
	return ds
}

func TestCovers(t *testing.T) {
	ts := testTypes(t)
	approved := mustParse(t, ts, `[{"type":"github_repository","actions":["read","write"],
		"locations":["https://api.github.com/repos/acme/api","https://api.github.com/repos/acme/web"]},
		{"type":"payment_initiation","actions":["status"],"identifier":"inv-1"}]`)
	for raw, want := range map[string]bool{
		// narrower or equal
		`[{"type":"github_repository","actions":["read"],"locations":["https://api.github.com/repos/acme/api"]}]`:         true,
		`[{"type":"github_repository","actions":["read","write"],"locations":["https://api.github.com/repos/acme/web"]}]`: true,
		`[{"type":"payment_initiation","actions":["status"],"identifier":"inv-1"}]`:                                       true,
		// wider: another location, another action, another identifier, no identifier
		`[{"type":"github_repository","actions":["read"],"locations":["https://api.github.com/repos/acme/ops"]}]`: false,
		`[{"type":"payment_initiation","actions":["initiate"],"identifier":"inv-1"}]`:                             false,
		`[{"type":"payment_initiation","actions":["status"],"identifier":"inv-2"}]`:                               false,
		`[{"type":"payment_initiation","actions":["status"]}]`:                                                    false,
		`[{"type":"payment_initiation","actions":["status"],"identifier":"inv-1","datatypes":["amount"]}]`:        false,
	} {
		if got := Covers(approved, mustParse(t, ts, raw)); got != want {
			t.Errorf("Covers(approved, %s) = %v, want %v", raw, got, want)
		}
	}
	// One requested detail may not combine the parts of two approved ones.
	split := mustParse(t, ts, `[{"type":"github_repository","actions":["read"],"locations":["https://api.github.com/repos/acme/api"]},
		{"type":"github_repository","actions":["write"],"locations":["https://api.github.com/repos/acme/web"]}]`)
	combined := mustParse(t, ts, `[{"type":"github_repository","actions":["write"],"locations":["https://api.github.com/repos/acme/api"]}]`)
	if Covers(split, combined) {
		t.Error("Covers combined write on one repository with read on it from another detail")
	}
	if !Covers(split, nil) || Covers(nil, combined) {
		t.Error("Covers of empty lists")
	}
}

type englishPrinter struct{}

func (englishPrinter) Sprintf(key string, args ...any) string { return fmt.Sprintf(key, args...) }

func TestDescribe(t *testing.T) {
	ts := testTypes(t)
	ds := mustParse(t, ts, `[{"type":"github_repository","actions":["write","read"],"locations":["https://api.github.com/repos/acme/api"]},
		{"type":"payment_initiation","actions":["initiate"],"datatypes":["amount"],"identifier":"inv-42"}]`)
	got := Describe(ts, ds, englishPrinter{})
	want := []string{
		"GitHub repository at https://api.github.com/repos/acme/api — may: read, write",
		"Payment — may: initiate; data: amount; identifier: inv-42",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Describe = %q\nwant %q", got, want)
	}
	// A type no longer declared is shown by its name, not dropped: what was approved is shown.
	if got := Describe(Types{}, ds[:1], englishPrinter{}); !strings.HasPrefix(got[0], "github_repository at ") {
		t.Errorf("Describe with an undeclared type = %q", got)
	}
}

func TestForConnector(t *testing.T) {
	ts := testTypes(t)
	ds := mustParse(t, ts, `[{"type":"github_repository","actions":["read"],"locations":["https://api.github.com/repos/acme/api"]},
		{"type":"payment_initiation","actions":["initiate"]}]`)
	if got := ForConnector(ts, ds, "team-a/github"); len(got) != 1 || got[0].Type != "github_repository" {
		t.Errorf("ForConnector = %v", got)
	}
	if got := ForConnector(ts, ds, "team-b/github"); got != nil {
		t.Errorf("ForConnector for another connector = %v", got)
	}
}

func BenchmarkParse(b *testing.B) {
	ts, _ := NewTypes([]Type{{Name: "github_repository", Actions: []string{"read", "write"}, RequireLocations: true,
		LocationPrefixes: []string{"https://api.github.com/repos/acme/"}}})
	raw := `[{"type":"github_repository","actions":["read","write"],"locations":["https://api.github.com/repos/acme/api","https://api.github.com/repos/acme/web"]}]`
	for b.Loop() {
		if _, err := Parse(ts, raw); err != nil {
			b.Fatal(err)
		}
	}
}
