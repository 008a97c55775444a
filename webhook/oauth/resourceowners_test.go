package oauth_test

import (
	"context"
	"maps"
	"net/url"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

// teamAResource is the MCP server team A runs and declares in its OAuthClient.
const teamAResource = "https://mcp.team-a.example/mcp"

// compiledClient is a declared OAuthClient as the controllers compile it, with its secret.
type compiledClient struct {
	c      *config.Client
	secret string
}

// compileTeams compiles, the way the operator does (controllers.Standalone), a Project in
// team-a that admits every namespace, team A's MCP server client declaring teamAResource, and
// a client of team B, created a minute later in its own namespace, declaring the same URL.
func compileTeams(t *testing.T) (owner, intruder compiledClient) {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	meta := func(ns, name, uid string, created time.Time) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Generation: 1, CreationTimestamp: metav1.NewTime(created)}
	}
	machine := func(ns, name, uid string, created time.Time) v1alpha1.OAuthClient {
		return v1alpha1.OAuthClient{ObjectMeta: meta(ns, name, uid, created), Spec: v1alpha1.OAuthClientSpec{
			ProjectRef:              v1alpha1.ProjectReference{Name: "p", Namespace: "team-a"},
			GrantTypes:              []v1alpha1.GrantType{v1alpha1.GrantClientCredentials, v1alpha1.GrantTokenExchange},
			TokenEndpointAuthMethod: v1alpha1.AuthClientSecretBasic,
			AccessTokenFormat:       v1alpha1.AccessTokenOpaque,
			Resources:               []v1alpha1.ResourceURI{teamAResource},
		}}
	}
	objs := &controllers.Objects{
		Secrets: []corev1.Secret{{ObjectMeta: meta("team-a", "people", "", now),
			Data: map[string][]byte{"passwords.yaml": []byte("- email: alice@example.com\n  hash: " + stack.PasswordHash(stack.AliceEmail) + "\n")}}},
		Projects: []v1alpha1.Project{{ObjectMeta: meta("team-a", "p", "u-p", now), Spec: v1alpha1.ProjectSpec{
			SignIn:            v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "people", Key: "passwords.yaml"}},
			AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll},
		}}},
		OAuthClients: []v1alpha1.OAuthClient{
			machine("team-a", "mcp-server", "0a000000-0000-0000-0000-00000000000a", now),
			machine("team-b", "intruder", "0b000000-0000-0000-0000-00000000000b", now.Add(time.Minute)),
		},
	}
	secrets := map[string]string{}
	for i := range objs.OAuthClients {
		sec, _, err := controllers.CredentialsSecret(&objs.OAuthClients[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		objs.Secrets = append(objs.Secrets, *sec)
		secrets[string(sec.Data[v1alpha1.ClientIDSecretKey])] = string(sec.Data[v1alpha1.ClientSecretSecretKey])
	}
	holder := &config.Holder{}
	s, err := controllers.NewStandalone(controllers.Options{PublicURL: "https://latchkey.example", Config: holder,
		Clock: func() time.Time { return now }}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	p := holder.Load().Projects["team-a/p"]
	if p == nil {
		t.Fatal("Project team-a/p not compiled")
	}
	get := func(oc *v1alpha1.OAuthClient) compiledClient {
		id := oc.Status.ClientID
		if p.Clients[id] == nil {
			t.Fatalf("OAuthClient %s/%s not compiled: %+v", oc.Namespace, oc.Name, oc.Status.Conditions)
		}
		return compiledClient{c: p.Clients[id], secret: secrets[id]}
	}
	return get(&objs.OAuthClients[0]), get(&objs.OAuthClients[1])
}

// Team B declares team A's MCP server in its own OAuthClient's spec.resources and asks for a
// token of its own for it: refused with invalid_target, since the URL belongs to team A's
// client, which does not share it with team B's namespace. Team A's own client still gets one.
func TestClientCredentialsOnlyForOwnedResources(t *testing.T) {
	t.Parallel()
	owner, intruder := compileTeams(t)
	h := stack.New(t, stack.Options{})
	h.Update(func(p *config.Project) {
		p.Clients = maps.Clone(p.Clients)
		p.Clients[owner.c.ID], p.Clients[intruder.c.ID] = owner.c, intruder.c
	})
	form := url.Values{"grant_type": {"client_credentials"}, "resource": {teamAResource}}

	tr := h.Token(form, intruder.c.ID, intruder.secret)
	if tr.Status != 400 || tr.Str("error") != "invalid_target" || tr.Str("access_token") != "" {
		t.Fatalf("team B's client got %d %s, want 400 invalid_target", tr.Status, tr.Raw)
	}
	tr = h.Token(form, owner.c.ID, owner.secret)
	if tr.Status != 200 {
		t.Fatalf("team A's client got %d %s", tr.Status, tr.Raw)
	}
	if aud := stack.Strings(h.Introspect(tr.Str("access_token")).Body["aud"]); len(aud) != 1 || aud[0] != teamAResource {
		t.Errorf("aud %v", aud)
	}
}
