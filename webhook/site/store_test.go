package site_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"latchkey.dev/latchkey/webhook/site"
)

// Env.Store is shared by every flow, so the compiler alone does not keep a flow to the part of
// the store it declares. Each flow's calls through Env (env.Store.X, h.env.Store.X,
// req.Env.Store.X) must be methods of its own interface in store.go; a flow that needs more
// adds it there, where a reader looks.
func TestFlowsKeepToTheirPartOfTheStore(t *testing.T) {
	parts := map[string]reflect.Type{
		".":        reflect.TypeFor[site.EnvStore](),
		"signin":   reflect.TypeFor[site.SignInStore](),
		"oauth":    reflect.TypeFor[site.TokenStore](),
		"consent":  reflect.TypeFor[site.ConsentStore](),
		"register": reflect.TypeFor[site.RegistrationStore](),
		"account":  reflect.TypeFor[site.AccountStore](),
		"links":    reflect.TypeFor[site.LinkStore](),
		"callback": reflect.TypeFor[site.CallbackStore](),
		"exchange": reflect.TypeFor[site.ExchangeStore](),
		"idjag":    reflect.TypeFor[site.IdentityAssertionStore](),
	}
	for dir, part := range parts {
		pattern := filepath.Join("..", dir, "*.go")
		if dir == "." {
			pattern = "*.go"
		}
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", pattern, err)
		}
		calls := 0
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				inner, ok := sel.X.(*ast.SelectorExpr)
				if !ok || inner.Sel.Name != "Store" || !fromEnv(inner.X) {
					return true
				}
				calls++
				if _, ok := part.MethodByName(sel.Sel.Name); !ok {
					t.Errorf("%s calls Env.Store.%s, which %s does not declare", path, sel.Sel.Name, part)
				}
				return true
			})
		}
		if calls == 0 {
			t.Errorf("%s: no calls through Env.Store found; is the check still looking in the right place?", dir)
		}
	}
}

// fromEnv reports whether x names an Env: env, e, or a field called env or Env.
func fromEnv(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "env" || x.Name == "e"
	case *ast.SelectorExpr:
		return x.Sel.Name == "env" || x.Sel.Name == "Env"
	}
	return false
}
