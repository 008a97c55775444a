package exchange_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/test/stack"
)

// compiledResources compiles, the way the operator does (controllers.Standalone), team A's MCP
// server client listing stack.MCPResource and a client team B created a minute later in its own
// namespace listing the same URL, and returns the resources each is compiled with.
func compiledResources(t *testing.T) (owner, intruder []string) {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	meta := func(ns, name, uid string, created time.Time) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Generation: 1, CreationTimestamp: metav1.NewTime(created)}
	}
	server := func(ns, name, uid string, created time.Time) v1alpha1.OAuthClient {
		return v1alpha1.OAuthClient{ObjectMeta: meta(ns, name, uid, created), Spec: v1alpha1.OAuthClientSpec{
			ProjectRef: v1alpha1.ProjectReference{Name: "p", Namespace: "team-a"},
			GrantTypes: []v1alpha1.GrantType{v1alpha1.GrantTokenExchange}, Resources: []v1alpha1.ResourceURI{stack.MCPResource},
		}}
	}
	objs := &controllers.Objects{
		Secrets: []corev1.Secret{{ObjectMeta: meta("team-a", "people", "", now), Data: map[string][]byte{"passwords.yaml": []byte("[]")}}},
		Projects: []v1alpha1.Project{{ObjectMeta: meta("team-a", "p", "u-p", now), Spec: v1alpha1.ProjectSpec{
			SignIn:            v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "people", Key: "passwords.yaml"}},
			AllowedNamespaces: &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll},
		}}},
		OAuthClients: []v1alpha1.OAuthClient{
			server("team-a", "github-tools", "0a000000-0000-0000-0000-00000000000a", now),
			server("team-b", "intruder", "0b000000-0000-0000-0000-00000000000b", now.Add(time.Minute)),
		},
	}
	for i := range objs.OAuthClients {
		sec, _, err := controllers.CredentialsSecret(&objs.OAuthClients[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		objs.Secrets = append(objs.Secrets, *sec)
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
	for _, oc := range objs.OAuthClients {
		if p == nil || p.Clients[oc.Status.ClientID] == nil {
			t.Fatalf("OAuthClient %s/%s not compiled", oc.Namespace, oc.Name)
		}
	}
	return p.Clients[objs.OAuthClients[0].Status.ClientID].Resources, p.Clients[objs.OAuthClients[1].Status.ClientID].Resources
}

// Team B lists team A's MCP server URL in its own OAuthClient, with a connector of its own, to
// be an audience of the tokens people's agents get for team A's server and exchange them. The
// URL is team A's, so team B's client is compiled without it, and its exchange of such a token
// is invalid_grant; team A's MCP server, compiled from the same objects, still exchanges it.
func TestOnlyTheResourcesOwnerIsItsTokensAudience(t *testing.T) {
	owner, intruder := compiledResources(t)
	h := stack.New(t, stack.Options{Audit: true, Links: true, TokenLifetime: time.Hour})
	const intruderSecret = "lk_cs_intruder-secret-for-tests-0123456789abcdefg"
	mcp := h.Project.Clients[stack.MCP]
	mcp.Resources = owner
	h.Project.Clients["intruder"] = &config.Client{
		ID: "intruder", SecretHash: secret.Hash(intruderSecret), Name: "Intruder", GrantTypes: mcp.GrantTypes,
		TokenEndpointAuthMethod: "client_secret_basic", Connectors: mcp.Connectors, Resources: intruder,
	}
	conn := h.ConnectDirectly(stack.AliceEmail, "2002", "alice-gh", "gho_alice")
	h.Allow(stack.AliceEmail, stack.Registered, conn)
	subject := h.AccessToken(stack.AliceEmail, stack.Registered, stack.MCPResource)

	if a := h.ExchangeAs("intruder", intruderSecret, subject, stack.Audience); a.Status != 400 || a.Str("error") != "invalid_grant" {
		t.Fatalf("team B's client exchanged a token for team A's server: %d %s", a.Status, a.Raw)
	}
	if a := h.ExchangeAs(stack.MCP, stack.MCPSecret, subject, stack.Audience); a.Status != 200 || a.Str("access_token") != "gho_alice" {
		t.Fatalf("team A's server: %d %s", a.Status, a.Raw)
	}
}
