package oauth_test

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/test/stack"
)

// The value of the Secret the administrator made for the agent (spec.clientSecretRef), and of
// a Secret of the same namespace that nobody gave to Latchkey.
const (
	agentSecretValue  = "agent-secret-from-the-secret-manager-0123456789"
	dbPasswordValue   = "the-database-password-nobody-gave-to-latchkey-0123"
	otherClientSecret = "lk_cs_another-clients-secret-made-by-latchkey-0123"
	upstreamSecret    = "github-oauth-app-client-secret-for-the-connector-01"
)

// compileSecretRefClients compiles, the way the operator does, a client "lkc_repo-helper" whose
// secret comes from a Secret labelled latchkey.dev/use=oauthclient, and a tenant's client
// "lkc_thief…" that name the namespace's database password Secret, which is not labelled, another
// client's credentials Secret (labelled for Latchkey's own use) and a Connector's client secret.
// It returns every client compiled, and the thieves' OAuthClients with their status.
func compileSecretRefClients(t *testing.T) (compiled map[string]*config.Client, thieves []v1alpha1.OAuthClient) {
	t.Helper()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	meta := func(name, uid string, labels map[string]string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(uid), Generation: 1,
			CreationTimestamp: metav1.NewTime(now), Labels: labels}
	}
	machine := func(name, uid, id string, ref v1alpha1.SecretKeyReference) v1alpha1.OAuthClient {
		return v1alpha1.OAuthClient{ObjectMeta: meta(name, uid, nil), Spec: v1alpha1.OAuthClientSpec{
			ProjectRef:              v1alpha1.ProjectReference{Name: "p"},
			ClientID:                v1alpha1.ClientID(id),
			ClientSecretRef:         &ref,
			GrantTypes:              []v1alpha1.GrantType{v1alpha1.GrantClientCredentials},
			TokenEndpointAuthMethod: v1alpha1.AuthClientSecretBasic,
			AccessTokenFormat:       v1alpha1.AccessTokenOpaque,
		}}
	}
	use := func(v string) map[string]string { return map[string]string{v1alpha1.SecretUseLabel: v} }
	objs := &controllers.Objects{
		Secrets: []corev1.Secret{
			{ObjectMeta: meta("people", "", use(v1alpha1.SecretUseProject)),
				Data: map[string][]byte{"passwords.yaml": []byte("- email: alice@example.com\n  hash: " + stack.PasswordHash(stack.AliceEmail) + "\n")}},
			{ObjectMeta: meta("agent-secret", "", use(v1alpha1.SecretUseOAuthClient)),
				Data: map[string][]byte{"client-secret": []byte(agentSecretValue)}},
			{ObjectMeta: meta("db-password", "", nil), Data: map[string][]byte{"password": []byte(dbPasswordValue)}},
			// Another client's credentials Secret, made by Latchkey, and a Connector's upstream
			// client secret: labelled, but for other uses.
			{ObjectMeta: meta("web-credentials", "", use(v1alpha1.SecretUseLatchkey)),
				Data: map[string][]byte{"client_secret": []byte(otherClientSecret)}},
			{ObjectMeta: meta("github-app", "", use(v1alpha1.SecretUseConnector)),
				Data: map[string][]byte{"clientSecret": []byte(upstreamSecret)}},
		},
		Projects: []v1alpha1.Project{{ObjectMeta: meta("p", "u-p", nil), Spec: v1alpha1.ProjectSpec{
			SignIn: v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "people", Key: "passwords.yaml"}},
		}}},
		OAuthClients: []v1alpha1.OAuthClient{
			machine("agent", "0a000000-0000-0000-0000-00000000000a", "lkc_repo-helper", v1alpha1.SecretKeyReference{Name: "agent-secret", Key: "client-secret"}),
			machine("thief", "0b000000-0000-0000-0000-00000000000b", "lkc_thief", v1alpha1.SecretKeyReference{Name: "db-password", Key: "password"}),
			machine("thief-2", "0c000000-0000-0000-0000-00000000000c", "lkc_thief-2", v1alpha1.SecretKeyReference{Name: "web-credentials", Key: "client_secret"}),
			machine("thief-3", "0d000000-0000-0000-0000-00000000000d", "lkc_thief-3", v1alpha1.SecretKeyReference{Name: "github-app", Key: "clientSecret"}),
		},
	}
	for i := range objs.OAuthClients {
		if sec, changed, err := controllers.CredentialsSecret(&objs.OAuthClients[i], nil); err != nil || changed || sec != nil {
			t.Fatalf("CredentialsSecret for a client with clientSecretRef = %v, %v, %v; want nothing to write", sec, changed, err)
		}
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
	if p.Clients["lkc_repo-helper"] == nil {
		t.Fatalf("agent not compiled: %+v", objs.OAuthClients[0].Status.Conditions)
	}
	return p.Clients, objs.OAuthClients[1:]
}

// An agent's client secret comes from the Secret the administrator made (spec.clientSecretRef):
// it authenticates with that value and no other. A tenant who may write OAuthClients but not read
// Secrets names the database password Secret as its client's secret: the client is not served
// (so the token endpoint is no oracle for the password), and it reads SecretMissing, as for a
// Secret that does not exist. A self-registered client asking for the declared id gets one of
// its own, and the declared id still accepts only the declared secret.
func TestClientSecretFromReferencedSecret(t *testing.T) {
	t.Parallel()
	compiled, thieves := compileSecretRefClients(t)
	h := stack.New(t, stack.Options{})
	h.Update(func(p *config.Project) {
		p.Clients = maps.Clone(p.Clients)
		maps.Copy(p.Clients, compiled)
	})
	form := url.Values{"grant_type": {"client_credentials"}}

	if tr := h.Token(form, "lkc_repo-helper", agentSecretValue); tr.Status != http.StatusOK || tr.Str("access_token") == "" {
		t.Fatalf("the agent with the referenced Secret's value got %d %s", tr.Status, tr.Raw)
	}
	for name, pass := range map[string]string{
		"another Secret's value":     dbPasswordValue,
		"the value with a character": agentSecretValue + "x",
		"a prefix of the value":      agentSecretValue[:32],
	} {
		t.Run(name, func(t *testing.T) {
			if tr := h.Token(form, "lkc_repo-helper", pass); tr.Status != http.StatusUnauthorized || tr.Str("error") != "invalid_client" {
				t.Fatalf("got %d %s, want 401 invalid_client", tr.Status, tr.Raw)
			}
		})
	}

	secrets := map[string]string{"lkc_thief": dbPasswordValue, "lkc_thief-2": otherClientSecret, "lkc_thief-3": upstreamSecret}
	for _, thief := range thieves {
		t.Run("tenant names "+thief.Spec.ClientSecretRef.Name, func(t *testing.T) {
			id := string(thief.Spec.ClientID)
			if tr := h.Token(form, id, secrets[id]); tr.Status != http.StatusUnauthorized {
				t.Fatalf("the thief's client with the Secret's value got %d %s", tr.Status, tr.Raw)
			}
			ready := meta.FindStatusCondition(thief.Status.Conditions, v1alpha1.ReadyCondition)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.SecretMissingReason ||
				!strings.Contains(ready.Message, "not found, or not labelled latchkey.dev/use=oauthclient") {
				t.Fatalf("Ready = %+v, want False SecretMissing worded as for a missing Secret", ready)
			}
		})
	}

	t.Run("registered client asks for the declared id", func(t *testing.T) {
		r := h.SendJSON(http.MethodPost, h.Issuer+"/register", "", `{"client_id":"lkc_repo-helper","client_secret":"`+agentSecretValue+`x",`+
			`"client_name":"Impostor","grant_types":["client_credentials"],"token_endpoint_auth_method":"client_secret_basic"}`)
		if r.Status != http.StatusCreated {
			t.Fatalf("registration: %d %s", r.Status, r.Raw)
		}
		if got := r.Str("client_id"); got == "lkc_repo-helper" || strings.HasPrefix(got, config.DeclaredClientPrefix) {
			t.Fatalf("registration handed out client id %q", got)
		}
		if tr := h.Token(form, "lkc_repo-helper", r.Str("client_secret")); tr.Status != http.StatusUnauthorized {
			t.Fatalf("the declared id with the registered client's secret got %d %s", tr.Status, tr.Raw)
		}
		if tr := h.Token(form, "lkc_repo-helper", agentSecretValue); tr.Status != http.StatusOK {
			t.Fatalf("the agent after the registration got %d %s", tr.Status, tr.Raw)
		}
	})
}
