package main

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
	"time"

	"latchkey.dev/latchkey/internal/admintest"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
)

func sharedProject(ns string) *config.Project {
	p := project(ns, "demo")
	p.Issuer = "https://latchkey.example/" + ns + "/demo"
	p.Connectors[ns+"/github"] = &config.Connector{Key: ns + "/github", Namespace: ns, Name: "github", Shared: true,
		SharedClients: []string{ns + "/repo-helper"}}
	return p
}

// The tenant admin lists her namespace's shared accounts, gets a start URL that works (its
// code is a stored start), and disconnects the account; the same commands in team-b are
// refused by the kube-apiserver and change nothing.
func TestPluginShared(t *testing.T) {
	e := admintest.Start(t, []*config.Project{sharedProject("team-a"), sharedProject("team-b")}, nil)
	tina := e.Kubeconfig(t, "tina")
	kl := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(t.Context(), append([]string{"--kubeconfig", tina}, args...), &out)
		return out.String(), err
	}
	now := time.Now()
	for _, ns := range []string{"team-a", "team-b"} {
		_, _, err := e.Store.SaveSharedConnection(t.Context(), store.Connection{ID: "shared-" + ns, Project: ns + "/demo",
			Subject: store.SharedSubject(ns + "/github"), Connector: ns + "/github", AccountID: "1", AccountName: ns + "-bot",
			KeyID: "k", Status: store.ConnectionActive, CreatedAt: now, UpdatedAt: now})
		must(t, err)
	}

	out, err := kl("shared", "-n", "team-a")
	if err != nil || !strings.Contains(out, "team-a.github") || !strings.Contains(out, "team-a-bot") || !strings.Contains(out, "active") {
		t.Fatalf("shared: %v\n%s", err, out)
	}
	out, err = kl("shared", "connect", "github", "-n", "team-a")
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, out)
	}
	i := strings.Index(out, "https://latchkey.example/team-a/demo/shared-connections/start/")
	if i < 0 {
		t.Fatalf("no start URL in\n%s", out)
	}
	u, _ := url.Parse(strings.TrimSpace(out[i:]))
	code := u.Path[strings.LastIndex(u.Path, "/")+1:]
	if _, err := e.Store.TakeSharedStart(t.Context(), secret.Hash(code), time.Now()); err != nil {
		t.Fatalf("the printed start URL is no stored start: %v", err)
	}

	for _, args := range [][]string{
		{"shared", "-n", "team-b"},
		{"shared", "connect", "github", "-n", "team-b"},
		{"shared", "disconnect", "team-b/github", "-n", "team-b"},
	} {
		out, err := kl(args...)
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("tina %v: %v\n%s", args, err, out)
		}
	}
	if _, err := e.Store.GetConnection(t.Context(), "team-b/demo", "shared-team-b"); err != nil {
		t.Fatalf("team-b's shared account after refused commands: %v", err)
	}

	out, err = kl("shared", "disconnect", "github", "-n", "team-a")
	if err != nil || !strings.Contains(out, "shared connection team-a.github disconnected") {
		t.Fatalf("disconnect: %v\n%s", err, out)
	}
	if _, err := e.Store.GetConnection(t.Context(), "team-a/demo", "shared-team-a"); err == nil {
		t.Fatal("team-a's shared account survived the disconnect")
	}
}
