package sqlstore

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Every store.Store operation is observed once, under its own name: each method's body defers
// s.observe(ctx, "<its name>", …). A method added without it, or with a name copied from its
// neighbour, would report nothing or the wrong operation; reading the source catches both
// without a database.
func TestEveryOperationIsObserved(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	observed := map[string]string{} // method -> the name it observes under
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Body == nil || !fn.Name.IsExported() {
				continue
			}
			observed[fn.Name.Name] = observedName(fn.Body)
		}
	}
	iface := reflect.TypeFor[store.Store]()
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		switch got, ok := observed[name]; {
		case !ok:
			t.Errorf("store.Store.%s: no method on *Store", name)
		case got != name:
			t.Errorf("(*Store).%s observes itself as %q; want a first-level defer s.observe(ctx, %q, …)", name, got, name)
		}
	}
}

// observedName returns the operation name of the body's top-level defer s.observe(ctx, "…", …)
// (or s.observeWithoutContext("…", …), for a method that takes no context).
func observedName(body *ast.BlockStmt) string {
	for _, st := range body.List {
		d, ok := st.(*ast.DeferStmt)
		if !ok {
			continue
		}
		sel, ok := d.Call.Fun.(*ast.SelectorExpr)
		if !ok {
			continue
		}
		at := -1
		switch sel.Sel.Name {
		case "observe":
			at = 1
		case "observeWithoutContext":
			at = 0
		}
		if at < 0 || len(d.Call.Args) <= at {
			continue
		}
		if lit, ok := d.Call.Args[at].(*ast.BasicLit); ok {
			name, _ := strconv.Unquote(lit.Value)
			return name
		}
	}
	return ""
}

func TestObserveReportsOnceWithWhatTheCallerSaw(t *testing.T) {
	type call struct {
		op  string
		err error
	}
	var calls []call
	st, err := Open(context.Background(), sqliteDSN(t), Observe(func(op string, took time.Duration, err error) {
		if took < 0 {
			t.Errorf("%s took %v", op, took)
		}
		calls = append(calls, call{op, err})
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if _, err := st.GetPerson(ctx, "team/demo", "nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetPerson of nobody: %v", err)
	}
	code := store.AuthCode{Hash: []byte("code-hash"), Project: "team/demo", ClientID: "app", Subject: "p1",
		RedirectURI: "https://app.example/cb", ExpiresAt: now.Add(time.Minute), CreatedAt: now}
	if err := st.CreateAuthCode(ctx, code); err != nil {
		t.Fatal(err)
	}
	wrong := errors.New("wrong verifier")
	if _, err := st.RedeemAuthCode(ctx, code.Hash, now, func(store.AuthCode) error { return wrong }); !errors.Is(err, wrong) {
		t.Fatalf("refused redemption: %v", err)
	}
	// On SQLite DeleteConnection reads the connection first; that read is part of it.
	if err := st.DeleteConnection(ctx, "team/demo", "none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteConnection of nothing: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	want := []call{
		{"GetPerson", store.ErrNotFound},
		{"CreateAuthCode", nil},
		{"RedeemAuthCode", nil}, // the check refused: the store answered correctly
		{"DeleteConnection", store.ErrNotFound},
		{"Close", nil},
	}
	if len(calls) != len(want) {
		t.Fatalf("observed %v, want %v", calls, want)
	}
	for i := range want {
		if calls[i].op != want[i].op || !errors.Is(calls[i].err, want[i].err) || (want[i].err == nil) != (calls[i].err == nil) {
			t.Errorf("observation %d = %v, want %v", i, calls[i], want[i])
		}
	}
}
