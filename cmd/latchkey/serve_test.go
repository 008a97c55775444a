package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

func parseLocal(t *testing.T, args ...string) (options, error) {
	t.Helper()
	fs := flag.NewFlagSet("latchkey", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.database, "database", defaultDatabase, "")
	fs.Bool("leader-elect", false, "")
	fs.String("kubeconfig", "", "")
	o.local.register(fs)
	if len(args) > 0 && args[0] == "serve" {
		o.local.serve = true
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	err := o.local.check(fs, &o)
	return o, err
}

func TestServeFlags(t *testing.T) {
	o, err := parseLocal(t, "serve", "--config-dir", "cfg", "--data-dir", "/var/lib/latchkey")
	if err != nil || !o.local.enabled() || o.database != "sqlite:/var/lib/latchkey/latchkey.db" {
		t.Errorf("serve --config-dir: %v, database %q", err, o.database)
	}
	if o, err := parseLocal(t, "serve", "--config-dir", "cfg", "--database", "postgres://db/x"); err != nil || o.database != "postgres://db/x" {
		t.Errorf("an explicit --database is kept: %v %q", err, o.database)
	}
	if _, err := parseLocal(t, "serve"); err == nil || !strings.Contains(err.Error(), "--config-dir is required") {
		t.Errorf("serve without --config-dir: %v", err)
	}
	for _, f := range []string{"--leader-elect", "--kubeconfig=x"} {
		if _, err := parseLocal(t, "--config-dir", "cfg", f); err == nil || !strings.Contains(err.Error(), "needs a cluster") {
			t.Errorf("--config-dir with %s: %v", f, err)
		}
	}
	if o, err := parseLocal(t, "--leader-elect"); err != nil || o.local.enabled() {
		t.Errorf("the cluster invocation: %v", err)
	}
}

// The group stands in for the manager: the first failure stops the others and is returned.
func TestGroupStopsOnFirstError(t *testing.T) {
	g := &group{}
	boom := errors.New("boom")
	stopped := make(chan struct{})
	_ = g.Add(manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil }))
	_ = g.Add(manager.RunnableFunc(func(context.Context) error { return boom }))
	if err := g.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want boom", err)
	}
	<-stopped
}
