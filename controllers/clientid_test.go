//go:build !latchkey_local

package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
)

// forOAuthClient labels a test Secret as its owner opts it in as OAuthClients' client secret.
func forOAuthClient() map[string]string {
	return map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseOAuthClient}
}

// TestClientIDValidation: the API server refuses a spec.clientID that could be taken for a
// dynamically registered client's id or a client ID metadata document's, one that needs escaping,
// a change or removal of a declared id, and a spec.clientSecretRef on a client without a secret.
func TestClientIDValidation(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	oauthClient := func(mut func(*v1alpha1.OAuthClientSpec)) *v1alpha1.OAuthClient {
		c := newClient(ns, "c-"+randomSuffix(), v1alpha1.ProjectReference{Name: "proj"})
		mut(&c.Spec)
		return c
	}
	withID := func(id string) *v1alpha1.OAuthClient {
		return oauthClient(func(s *v1alpha1.OAuthClientSpec) { s.ClientID = v1alpha1.ClientID(id) })
	}
	ref := &v1alpha1.SecretKeyReference{Name: "agent-secret", Key: "client-secret"}
	tests := []struct {
		name string
		obj  *v1alpha1.OAuthClient
		// want are substrings of the error; empty means the object is valid.
		want []string
	}{
		{"declared id", withID("lkc_repo-helper.v2~x"), nil},
		{"an id Latchkey derived", withID("lkc_0a1b2c3d4e5f60718293a4b5c6d7e8f9"), nil},
		{"without the prefix", withID("repo-helper"), []string{"spec.clientID", "should match"}},
		{"a registered client's shape", withID("0a1b2c3d4e5f60718293a4b5c6d7e8f9"), []string{"spec.clientID", "should match"}},
		{"a metadata document's shape", withID("https://agent.example/client.json"), []string{"spec.clientID", "should match"}},
		{"a colon, which Basic authentication splits on", withID("lkc_a:b"), []string{"spec.clientID", "should match"}},
		{"a space", withID("lkc_a b"), []string{"spec.clientID", "should match"}},
		{"nothing after the prefix", withID("lkc_"), []string{"spec.clientID"}},
		{"too long", withID("lkc_" + strings.Repeat("a", 125)), []string{"spec.clientID", "128"}},
		{"secret from a Secret", oauthClient(func(s *v1alpha1.OAuthClientSpec) { s.ClientSecretRef = ref }), nil},
		{"secret from a Secret for a public client", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.ClientSecretRef = ref
			s.TokenEndpointAuthMethod = v1alpha1.AuthNone
		}), []string{"clientSecretRef needs a client with a secret"}},
		{"secret from a Secret for private_key_jwt", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.ClientSecretRef = ref
			s.TokenEndpointAuthMethod = v1alpha1.AuthPrivateKeyJWT
			s.JWKSURI = "https://agent.example/jwks.json"
		}), []string{"clientSecretRef needs a client with a secret"}},
		{"secret from a Secret and a credentials Secret", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.ClientSecretRef = ref
			s.SecretName = "agent-credentials"
		}), []string{"clientSecretRef and secretName conflict"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := k8s.Create(context.Background(), tc.obj)
			checkInvalid(t, err, tc.want)
		})
	}

	t.Run("declared id cannot change", func(t *testing.T) {
		oc := withID("lkc_fixed-" + randomSuffix())
		create(t, oc)
		for name, change := range map[string]v1alpha1.ClientID{"changed": "lkc_other", "removed": ""} {
			t.Run(name, func(t *testing.T) {
				var updateErr error
				eventually(t, "an update that is not a write conflict", func() error {
					if err := get(oc); err != nil {
						return err
					}
					oc.Spec.ClientID = change
					updateErr = k8s.Update(context.Background(), oc)
					if apierrors.IsConflict(updateErr) {
						return updateErr
					}
					return nil
				})
				checkInvalid(t, updateErr, []string{"clientID cannot be changed or removed once set"})
			})
		}
	})
	t.Run("an existing client may declare the id it has", func(t *testing.T) {
		oc := oauthClient(func(*v1alpha1.OAuthClientSpec) {})
		create(t, oc)
		update(t, oc, func(o *v1alpha1.OAuthClient) { o.Spec.ClientID = v1alpha1.ClientID(clientIDFor(o)) })
	})
}

func checkInvalid(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("err = %v, want Invalid with %q", err, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

// TestTenantCannotTakeClientID: a team in a namespace the Project admits declares, with a
// redirect URI of its own, the client id of another team's agent (declared, or the one Latchkey
// derived), to be handed the people's grants, the agent's permissions on their connections and
// the codes meant for it. The older OAuthClient keeps the id and stays compiled as it was; the
// newer one reports ClientIDConflict naming the holder and is not served. A namespace the
// Project does not admit cannot hold an id against the ones it does.
func TestTenantCannotTakeClientID(t *testing.T) {
	needEnv(t)
	// Creation times have a resolution of a second: on a tie the namespace decides, so team-a's
	// is the one that sorts first.
	names := []string{newNamespace(t, nil), newNamespace(t, nil), newNamespace(t, nil)}
	slices.Sort(names)
	teamA, teamB, outsider := names[0], names[1], names[2]
	newProject(t, teamA, "proj", &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{teamA, teamB}},
		}}})
	ref := v1alpha1.ProjectReference{Name: "proj", Namespace: teamA}
	agent := func(ns, name, id string, redirect v1alpha1.RedirectURI) *v1alpha1.OAuthClient {
		oc := newClient(ns, name, ref)
		oc.Spec.ClientID = v1alpha1.ClientID(id)
		oc.Spec.RedirectURIs = []v1alpha1.RedirectURI{redirect}
		return oc
	}
	servedBy := func(id string, owner *v1alpha1.OAuthClient, redirect string) func(*config.Snapshot) error {
		return func(s *config.Snapshot) error {
			c := inProject(s, teamA+"/proj").Clients[id]
			if c == nil {
				return fmt.Errorf("client %s not compiled", id)
			}
			if c.Source != owner.Namespace+"/"+owner.Name || !slices.Equal(c.RedirectURIs, []string{redirect}) {
				return fmt.Errorf("client %s is served by %s with %v, want %s/%s with %s", id, c.Source, c.RedirectURIs, owner.Namespace, owner.Name, redirect)
			}
			return nil
		}
	}

	// The outsider's namespace is not admitted; its older client does not hold the id.
	squatter := agent(outsider, "squatter", "lkc_repo-helper", "https://squatter.example/cb")
	create(t, squatter)
	waitNotReady(t, squatter, v1alpha1.OAuthClientNotAllowedReason)

	owner := agent(teamA, "repo-helper", "lkc_repo-helper", "https://repo-helper.team-a.example/cb")
	create(t, owner)
	waitReady(t, owner)
	derived := newClient(teamA, "plain", ref)
	create(t, derived)
	waitReady(t, derived)
	if err := get(derived); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		holder *v1alpha1.OAuthClient
		id     string
		hold   string
	}{
		{"a declared id", owner, "lkc_repo-helper", "https://repo-helper.team-a.example/cb"},
		{"an id Latchkey derived", derived, derived.Status.ClientID, "http://127.0.0.1:8070/callback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			intruder := agent(teamB, "intruder-"+randomSuffix(), tc.id, "https://collector.team-b.example/cb")
			create(t, intruder)
			cond := waitNotReady(t, intruder, v1alpha1.OAuthClientClientIDConflictReason)
			if !strings.Contains(cond.Message, tc.holder.Namespace+"/"+tc.holder.Name) || !strings.Contains(cond.Message, tc.id) {
				t.Errorf("message %q names neither the holder nor the id", cond.Message)
			}
			waitEvent(t, intruder, corev1.EventTypeWarning, v1alpha1.OAuthClientClientIDConflictReason)
			waitSnapshot(t, "the id stays the holder's", servedBy(tc.id, tc.holder, tc.hold))
			waitReady(t, tc.holder)
		})
	}
}

// TestOAuthClientSecretRef: a client whose secret comes from the administrator's Secret
// (spec.clientSecretRef) gets no credentials Secret, is compiled with the hash of that Secret's
// value, follows the Secret when it changes (the old value stops working), and is not served
// while the value is missing, empty or too short.
func TestOAuthClientSecretRef(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	first := secret.New(secret.PrefixClientSecret)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-secret", Labels: forOAuthClient()},
		Data: map[string][]byte{"client-secret": []byte(first)}}
	create(t, sec)
	oc := newClient(ns, "agent", v1alpha1.ProjectReference{Name: "proj"})
	oc.Spec.ClientID = "lkc_agent"
	oc.Spec.ClientSecretRef = &v1alpha1.SecretKeyReference{Name: "agent-secret", Key: "client-secret"}
	create(t, oc)
	waitReady(t, oc)
	if err := get(oc); err != nil {
		t.Fatal(err)
	}
	if oc.Status.ClientID != "lkc_agent" || oc.Status.SecretName != "agent-secret" {
		t.Errorf("status clientID %q secretName %q", oc.Status.ClientID, oc.Status.SecretName)
	}
	if err := get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-credentials"}}); !apierrors.IsNotFound(err) {
		t.Errorf("a credentials Secret was written (or could not be read): %v", err)
	}
	hashIs := func(plain string) func(*config.Snapshot) error {
		return func(s *config.Snapshot) error {
			c := inProject(s, ns+"/proj").Clients["lkc_agent"]
			if c == nil {
				return errors.New("client not compiled")
			}
			if !secret.HashEqual(plain, c.SecretHash) {
				return errors.New("hash is not of the expected secret")
			}
			return nil
		}
	}
	waitSnapshot(t, "client with the Secret's hash", hashIs(first))

	rotated := secret.New(secret.PrefixClientSecret)
	update(t, sec, func(s *corev1.Secret) { s.Data["client-secret"] = []byte(rotated) })
	waitSnapshot(t, "the rotated value, and only it", hashIs(rotated))

	notServed := func(s *config.Snapshot) error {
		if inProject(s, ns+"/proj").Clients["lkc_agent"] != nil {
			return errors.New("still compiled")
		}
		return nil
	}
	for _, tc := range []struct {
		name   string
		data   map[string][]byte
		reason string
	}{
		{"too short", map[string][]byte{"client-secret": []byte("short-secret")}, v1alpha1.OAuthClientSecretInvalidReason},
		{"empty", map[string][]byte{"client-secret": {}}, v1alpha1.OAuthClientSecretInvalidReason},
		{"key missing", map[string][]byte{"other": []byte(rotated)}, v1alpha1.OAuthClientSecretInvalidReason},
	} {
		t.Run(tc.name, func(t *testing.T) {
			update(t, sec, func(s *corev1.Secret) { s.Data = tc.data })
			cond := waitNotReady(t, oc, tc.reason)
			if !strings.Contains(cond.Message, ns+"/agent-secret") {
				t.Errorf("message %q does not name the Secret", cond.Message)
			}
			waitSnapshot(t, "not served", notServed)
			update(t, sec, func(s *corev1.Secret) { s.Data = map[string][]byte{"client-secret": []byte(rotated)} })
			waitReady(t, oc)
		})
	}
	t.Run("Secret deleted", func(t *testing.T) {
		if err := k8s.Delete(context.Background(), sec); err != nil {
			t.Fatal(err)
		}
		waitNotReady(t, oc, v1alpha1.OAuthClientSecretMissingReason)
		waitSnapshot(t, "not served", notServed)
	})
}

// TestTenantOAuthClientUsesOnlyOptedInSecrets: a team that may write OAuthClients but not read
// Secrets names the namespace's database password, another client's credentials Secret or a
// Connector's client secret as its client's secret, to have Latchkey accept the value (and test
// guesses against it at the token endpoint). Nothing of those Secrets is compiled, and the
// condition reads exactly as for a Secret that does not exist. Once the owner labels the Secret
// latchkey.dev/use=oauthclient, the client uses it.
func TestTenantOAuthClientUsesOnlyOptedInSecrets(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	empty := newNamespace(t, nil) // the same names, but no Secret at all
	for _, n := range []string{ns, empty} {
		newProject(t, n, "proj", nil)
	}
	web := newClient(ns, "web", v1alpha1.ProjectReference{Name: "proj"})
	create(t, web)
	waitReady(t, web)
	const dbPassword = "the-database-password-0123456789"
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Data: map[string][]byte{"password": []byte(dbPassword)}})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github-app", Labels: forConnector()},
		Data: map[string][]byte{"clientSecret": []byte("the-github-app-client-secret-0123456789")}})

	targets := []struct{ name, secret, key string }{
		{"a database password", "db", "password"},
		{"another client's credentials", "web-credentials", "client_secret"},
		{"a Connector's client secret", "github-app", "clientSecret"},
	}
	thief := func(namespace, name, secretName, key string) *v1alpha1.OAuthClient {
		oc := newClient(namespace, name, v1alpha1.ProjectReference{Name: "proj"})
		oc.Spec.ClientSecretRef = &v1alpha1.SecretKeyReference{Name: secretName, Key: key}
		return oc
	}
	var thieves []*v1alpha1.OAuthClient
	for i, tc := range targets {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("thief-%d", i)
			oc := thief(ns, name, tc.secret, tc.key)
			create(t, oc)
			thieves = append(thieves, oc)
			missing := thief(empty, name, tc.secret, tc.key)
			create(t, missing)
			got := waitNotReady(t, oc, v1alpha1.OAuthClientSecretMissingReason)
			want := waitNotReady(t, missing, v1alpha1.OAuthClientSecretMissingReason)
			if msg := strings.ReplaceAll(got.Message, ns, empty); msg != want.Message {
				t.Errorf("the condition tells an existing Secret from a missing one:\n%s\n%s", got.Message, want.Message)
			}
		})
	}
	waitSnapshot(t, "no thief is served", func(s *config.Snapshot) error {
		p := inProject(s, ns+"/proj")
		if p.Clients[clientIDFor(web)] == nil {
			return errors.New("project not compiled yet")
		}
		for _, oc := range thieves {
			if p.Clients[clientIDFor(oc)] != nil {
				return fmt.Errorf("OAuthClient %s compiled with a Secret it may not use", oc.Name)
			}
		}
		return nil
	})

	// The owner opts the Secret in: now it is the client's secret.
	update(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}}, func(s *corev1.Secret) {
		s.Labels = forOAuthClient()
	})
	waitReady(t, thieves[0])
	waitSnapshot(t, "the opted-in Secret is used", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Clients[clientIDFor(thieves[0])]
		if c == nil || !secret.HashEqual(dbPassword, c.SecretHash) {
			return errors.New("not compiled with the opted-in Secret")
		}
		return nil
	})
}

// TestDeletedClientsIDStaysWithItsNamespace: team A's agent had a declared id, people consented
// to it and allowed it on their connections; team A deletes it. A team in another namespace the
// Project admits declares the same id, to be served under it and find all of that. The store
// remembers that team A's namespace held the id: the newcomer reports ClientIDConflict naming
// that namespace and is never served, while team A may re-create its client under the id (as a
// cluster move does).
func TestDeletedClientsIDStaysWithItsNamespace(t *testing.T) {
	needEnv(t)
	names := []string{newNamespace(t, nil), newNamespace(t, nil)}
	slices.Sort(names)
	teamA, teamB := names[0], names[1]
	newProject(t, teamA, "proj", &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll})
	ref := v1alpha1.ProjectReference{Name: "proj", Namespace: teamA}
	agent := func(ns, name string, redirect v1alpha1.RedirectURI) *v1alpha1.OAuthClient {
		oc := newClient(ns, name, ref)
		oc.Spec.ClientID = "lkc_repo-helper"
		oc.Spec.RedirectURIs = []v1alpha1.RedirectURI{redirect}
		return oc
	}
	compiled := func(s *config.Snapshot) *config.Client { return inProject(s, teamA+"/proj").Clients["lkc_repo-helper"] }

	owner := agent(teamA, "repo-helper", "https://repo-helper.team-a.example/cb")
	create(t, owner)
	waitReady(t, owner)
	waitSnapshot(t, "team A's agent served", func(s *config.Snapshot) error {
		if c := compiled(s); c == nil || c.Source != teamA+"/repo-helper" {
			return errors.New("not compiled")
		}
		return nil
	})
	if err := k8s.Delete(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, "team A's agent gone", func(s *config.Snapshot) error {
		if compiled(s) != nil {
			return errors.New("still compiled")
		}
		return nil
	})

	intruder := agent(teamB, "repo-helper", "https://collector.team-b.example/cb")
	create(t, intruder)
	cond := waitNotReady(t, intruder, v1alpha1.OAuthClientClientIDConflictReason)
	if !strings.Contains(cond.Message, fmt.Sprintf("namespace %q", teamA)) {
		t.Errorf("message %q does not name the namespace holding the id", cond.Message)
	}
	if err := get(intruder); err != nil {
		t.Fatal(err)
	}
	if intruder.Status.ClientID != "" {
		t.Errorf("status.clientID = %q for a client that does not hold it", intruder.Status.ClientID)
	}

	// Team A re-creates its agent: it is served under the id again, and the newcomer is not.
	again := agent(teamA, "repo-helper-2", "https://repo-helper.team-a.example/cb")
	create(t, again)
	waitReady(t, again)
	waitSnapshot(t, "team A's agent served again", func(s *config.Snapshot) error {
		if c := compiled(s); c == nil || c.Source != teamA+"/repo-helper-2" {
			return fmt.Errorf("served by %v", c)
		}
		return nil
	})
	waitNotReady(t, intruder, v1alpha1.OAuthClientClientIDConflictReason)
}
