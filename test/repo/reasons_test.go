package repo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestConditionReasonsDocumented: every condition or Event reason the API declares
// (api/v1alpha1) or a controller records (controllers) appears, in backquotes, in the
// "Conditions and what to do" section of docs/projects-and-clients.md. An administrator who
// meets a reason in `kubectl describe` or Argo CD looks it up there; a reason added without a
// row leaves them guessing. A reason is a string constant whose name ends in "Reason".
func TestConditionReasonsDocumented(t *testing.T) {
	root := "../.."
	reasons := map[string][]string{} // value -> where declared
	fset := token.NewFileSet()
	for _, dir := range []string{"api/v1alpha1", "controllers"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range file.Decls {
				g, ok := decl.(*ast.GenDecl)
				if !ok || g.Tok != token.CONST {
					continue
				}
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if !strings.HasSuffix(name.Name, "Reason") || i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue // an alias of another reason, checked where it is declared
						}
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						reasons[v] = append(reasons[v], dir+"."+name.Name)
					}
				}
			}
		}
	}
	if len(reasons) < 30 {
		t.Fatalf("found only %d reasons: the parser no longer sees the constants", len(reasons))
	}

	page := filepath.Join(root, "docs", "projects-and-clients.md")
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Conditions and what to do\n")
	if !ok {
		t.Fatalf("%s has no section \"Conditions and what to do\"", page)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var missing []string
	for v, where := range reasons {
		if !strings.Contains(section, "`"+v+"`") {
			missing = append(missing, v+" ("+strings.Join(where, ", ")+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("reason %s is not in the condition tables of docs/projects-and-clients.md", m)
	}
}
