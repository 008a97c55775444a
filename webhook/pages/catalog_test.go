package pages

import (
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite locales/en.json from the keys the code uses")

// The packages whose Go code puts sentences on pages; their messages must be in the catalogs.
var pageCode = []string{".", "../links", "../callback", "../account", "../apikey", "../signin", "../consent", "../router.go", "../exchange", "../ciba", "../../internal/authzdetails"}

// textFields are the fields of page data that render translates (pages.go).
var textFields = map[string]bool{"Title": true, "Heading": true, "Message": true, "Label": true, "Error": true,
	"Notice": true, "Paragraphs": true, "OIDCLabel": true}

// lastArg are calls whose string arguments (all, or only the last) are sentences for people.
var allArgs = map[string]bool{"page": true}
var lastArg = map[string]bool{"offer": true, "consentPage": true, "JSONError": true, "Translate": true}

func str(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			a, ok1 := str(e.X)
			b, ok2 := str(e.Y)
			return a + b, ok1 && ok2
		}
	case *ast.ParenExpr:
		return str(e.X)
	}
	return "", false
}

// usedKeys finds every catalog key the templates and the page code use.
func usedKeys(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	tre := regexp.MustCompile(`\{\{-?\s*(?:T|TH)\s+("(?:[^"\\]|\\.)*")`)
	files, _ := filepath.Glob("templates/*.html")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tre.FindAllStringSubmatch(string(b), -1) {
			s, err := strconv.Unquote(m[1])
			if err != nil {
				t.Fatalf("%s: %s: %v", f, m[1], err)
			}
			out[s] = true
		}
	}
	add := func(e ast.Expr) {
		if s, ok := str(e); ok && s != "" {
			out[s] = true
		}
	}
	fset := token.NewFileSet()
	for _, dir := range pageCode {
		var gofiles []string
		if strings.HasSuffix(dir, ".go") {
			gofiles = []string{dir}
		} else {
			gofiles, _ = filepath.Glob(dir + "/*.go")
		}
		for _, f := range gofiles {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.KeyValueExpr:
					if id, ok := n.Key.(*ast.Ident); ok && textFields[id.Name] {
						if cl, ok := n.Value.(*ast.CompositeLit); ok {
							for _, e := range cl.Elts {
								add(e)
							}
						} else {
							add(n.Value)
						}
					}
				case *ast.AssignStmt:
					for i, l := range n.Lhs {
						if se, ok := l.(*ast.SelectorExpr); ok && textFields[se.Sel.Name] && i < len(n.Rhs) {
							add(n.Rhs[i])
						}
					}
				case *ast.ValueSpec:
					for i, name := range n.Names {
						if strings.HasPrefix(name.Name, "msg") && i < len(n.Values) {
							add(n.Values[i])
						}
						if (name.Name == "notices" || name.Name == "scopeWords") && i < len(n.Values) {
							if cl, ok := n.Values[i].(*ast.CompositeLit); ok {
								for _, e := range cl.Elts {
									add(e.(*ast.KeyValueExpr).Value)
								}
							}
						}
					}
				case *ast.CallExpr:
					name := ""
					switch fn := n.Fun.(type) {
					case *ast.Ident:
						name = fn.Name
					case *ast.SelectorExpr:
						name = fn.Sel.Name
						if x, ok := fn.X.(*ast.Ident); ok && x.Name == "pages" && (name == "T" || name == "Sprintf") {
							// pages.T(w, key, …) and pages.Sprintf(lang, key, …)
							if len(n.Args) > 1 {
								add(n.Args[1])
							}
						}
					}
					switch {
					case allArgs[name]:
						for _, a := range n.Args {
							add(a)
						}
					case lastArg[name] && len(n.Args) > 0:
						add(n.Args[len(n.Args)-1])
					case name == "T" && len(n.Args) > 1:
						add(n.Args[1])
					}
				}
				return true
			})
		}
	}
	return out
}

func readLocale(t *testing.T, tag string) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile("locales/" + tag + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("locales/%s.json: %v", tag, err)
	}
	return m
}

// TestEnglishCatalogHasEveryKeyUsed: a sentence missing from the English catalog would show in
// English in every language, silently.
func TestEnglishCatalogHasEveryKeyUsed(t *testing.T) {
	used := usedKeys(t)
	if *update {
		en := readLocale(t, "en")
		for k := range used {
			if _, ok := en[k]; !ok {
				b, _ := json.Marshal(k)
				en[k] = b
			}
		}
		b, _ := json.MarshalIndent(en, "", "  ")
		if err := os.WriteFile("locales/en.json", append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	en := readLocale(t, "en")
	var missing []string
	for k := range used {
		if _, ok := en[k]; !ok {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	for _, k := range missing {
		t.Errorf("locales/en.json lacks %q", k)
	}
}

var verbRE = regexp.MustCompile(`%[-+# 0]*[0-9]*(?:\.[0-9]+)?[a-zA-Z%]`)

// verbs lists a message's format verbs in order, for each plural case.
func verbs(t *testing.T, raw json.RawMessage) [][]string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]string{verbRE.FindAllString(s, -1)}
	}
	var p pluralMessage
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return [][]string{verbRE.FindAllString(p.One, -1), verbRE.FindAllString(p.Other, -1)}
}

// TestCatalogsAreComplete: every shipped language has exactly English's keys, and each message
// the same format verbs in the same order (a plural's "one" may leave out the count).
func TestCatalogsAreComplete(t *testing.T) {
	en := readLocale(t, "en")
	for _, l := range languages[1:] {
		tag := l.Tag.String()
		m := readLocale(t, tag)
		for k, v := range en {
			tv, ok := m[k]
			if !ok {
				t.Errorf("locales/%s.json lacks %q", tag, k)
				continue
			}
			ev, tvs := verbs(t, v), verbs(t, tv)
			want := ev[len(ev)-1] // a plural's "other" case
			if len(tvs) != len(ev) {
				t.Errorf("locales/%s.json: %q is plural in one language only", tag, k)
				continue
			}
			for i, got := range tvs {
				// A plural's "one" may leave the count out ("a second").
				if !slices.Equal(got, want) && !(len(tvs) == 2 && i == 0 && len(got) == 0) {
					t.Errorf("locales/%s.json: %q has verbs %v, English %v", tag, k, got, want)
				}
			}
		}
		for k := range m {
			if _, ok := en[k]; !ok {
				t.Errorf("locales/%s.json has %q, which English lacks", tag, k)
			}
		}
	}
}
