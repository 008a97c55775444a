package events_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/events"
)

var actionShape = regexp.MustCompile(`^[a-z_]+(\.[a-z_]+)+$`)

// catalogued reports whether action is in the catalog, or is an alias of a security event type.
func catalogued(action string) bool {
	if slices.Contains(events.AuditTypes(), action) {
		return true
	}
	_, ok := events.TypeOf(action)
	return ok
}

// Every audit action is a constant of this package, in the catalog: code outside it writes
// events.X, never the string, so the catalog and docs/audit.md (TestEveryAuditTypeIsDocumented)
// cover every action a record can have. Go cannot tell an action from another string, so this
// reads the source: an Action field set to a string literal, or a catalogued action spelled out,
// fails; so does a constant here shaped like an action that the catalog does not list.
func TestAuditActionsAreConstants(t *testing.T) {
	fset := token.NewFileSet()
	literal := func(e ast.Expr) (string, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		return s, err == nil
	}
	for _, root := range []string{"../../webhook", "../../controllers", "../../internal", "../../cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			// The store's conformance suite stores records of any action, as test data.
			if d.IsDir() && d.Name() == "conformance" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			inEvents := filepath.Dir(path) == filepath.Join("..", "..", "internal", "events")
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Action" {
						if s, ok := literal(n.Value); ok && actionShape.MatchString(s) {
							t.Errorf("%s: Action %q is a string; write its constant in internal/events", fset.Position(n.Pos()), s)
						}
					}
				case *ast.ValueSpec:
					for _, v := range n.Values {
						if s, ok := literal(v); ok && inEvents && actionShape.MatchString(s) && !catalogued(s) && s != "connection.refused_other_person" {
							t.Errorf("%s: %q looks like an audit action but is not in the catalog", fset.Position(v.Pos()), s)
						}
					}
				case *ast.BasicLit:
					if s, ok := literal(n); ok && !inEvents && catalogued(s) {
						t.Errorf("%s: %q is an audit action; write its constant in internal/events", fset.Position(n.Pos()), s)
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
