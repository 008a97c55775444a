//go:build !latchkey_local

package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/secret"
)

// applySamples creates every object in config/samples.
func applySamples(t *testing.T) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) > 0 {
				objs = append(objs, u)
			}
		}
	}
	// Namespaces first; everything else in any order, as GitOps tools would.
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
	})
	for _, u := range objs {
		// AlreadyExists: an earlier run in this process (go test -count=N) applied them.
		if err := k8s.Create(context.Background(), u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSamples applies config/samples and follows every object to Ready and into the snapshot.
func TestSamples(t *testing.T) {
	needEnv(t)
	applySamples(t)
	const ns = "latchkey-demo"
	issuer := testPublicURL + "/latchkey-demo/demo"

	project := &v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}}
	ready := waitReady(t, project)
	if project.Status.Issuer != issuer {
		t.Errorf("status.issuer = %q, want %q", project.Status.Issuer, issuer)
	}
	if !ready.LastTransitionTime.Time.Equal(testNow) {
		t.Errorf("lastTransitionTime = %s, want the injected clock's %s", ready.LastTransitionTime, testNow)
	}
	waitEvent(t, project, corev1.EventTypeNormal, v1alpha1.ProjectReadyReason)

	conn := &v1alpha1.Connector{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "github"}}
	waitReady(t, conn)
	if want := issuer + "/connectors/latchkey-demo/github/callback"; conn.Status.CallbackURL != want {
		t.Errorf("connector status.callbackURL = %q, want %q", conn.Status.CallbackURL, want)
	}
	if conn.Status.Audience != "github" {
		t.Errorf("connector status.audience = %q, want github", conn.Status.Audience)
	}

	waitReady(t, &v1alpha1.RedirectPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}})

	oc := &v1alpha1.OAuthClient{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo-helper"}}
	waitReady(t, oc)
	waitCondition(t, oc, v1alpha1.OAuthClientConnectorsResolvedCondition, metav1.ConditionTrue, v1alpha1.OAuthClientConnectorsResolvedReason)
	waitComplete(t, oc)
	if status, msg := health(t, oc); status != "Healthy" {
		t.Errorf("Argo CD health %s (%q), want Healthy", status, msg)
	}
	if !strings.HasPrefix(oc.Status.ClientID, "lkc_") || oc.Status.SecretName != "repo-helper-credentials" {
		t.Fatalf("status clientID %q secretName %q", oc.Status.ClientID, oc.Status.SecretName)
	}
	if len(oc.Status.Redirects) != 1 || oc.Status.Redirects[0].URI != "http://127.0.0.1:8070/callback" {
		t.Errorf("status.redirects = %+v", oc.Status.Redirects)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo-helper-credentials"}}
	if err := get(sec); err != nil {
		t.Fatal(err)
	}
	clientSecret := string(sec.Data["client_secret"])
	if string(sec.Data["client_id"]) != oc.Status.ClientID || !strings.HasPrefix(clientSecret, secret.PrefixClientSecret) {
		t.Fatalf("credentials Secret holds client_id %q and a secret with prefix %q", sec.Data["client_id"], clientSecret[:min(6, len(clientSecret))])
	}

	snap := waitSnapshot(t, "demo project with its client and connector", func(s *config.Snapshot) error {
		p := s.Project("latchkey-demo/demo")
		if p == nil {
			return errors.New("no project")
		}
		if p.Clients[oc.Status.ClientID] == nil || p.Connectors["latchkey-demo/github"] == nil {
			return fmt.Errorf("clients %d connectors %d", len(p.Clients), len(p.Connectors))
		}
		return nil
	})
	p := snap.Project("latchkey-demo/demo")
	if p.Issuer != issuer || p.DisplayName != "Latchkey demo" {
		t.Errorf("issuer %q display name %q", p.Issuer, p.DisplayName)
	}
	if p.Registration.Mode != config.RegistrationOpen || !p.Registration.ClientIDMetadataDocuments {
		t.Errorf("registration = %+v", p.Registration)
	}
	if p.Lifetimes != config.DefaultLifetimes() {
		t.Errorf("lifetimes = %+v, want the defaults", p.Lifetimes)
	}
	for email, pass := range map[string]string{"alice@example.com": "alice-demo-pass", "mallory@example.com": "mallory-demo-pass"} {
		u, ok := p.SignIn.Passwords[email]
		if !ok {
			t.Fatalf("no password entry for %s", email)
		}
		if err := bcrypt.CompareHashAndPassword([]byte(u.Hash), []byte(pass)); err != nil {
			t.Errorf("%s: demo password does not match its hash: %v", email, err)
		}
	}
	if r := p.Redirects; !r.Claude || !r.ChatGPT || !r.Loopback || !r.AppSchemes || r.OnlyRecognisedApps || len(r.Named) != 0 {
		t.Errorf("redirect rules = %+v", p.Redirects)
	}

	cl := p.Clients[oc.Status.ClientID]
	if !secret.HashEqual(clientSecret, cl.SecretHash) {
		t.Error("snapshot client SecretHash is not the SHA-256 of the Secret's client_secret")
	}
	if bytes.Contains(cl.SecretHash, []byte(clientSecret)) {
		t.Error("snapshot holds the plaintext client secret")
	}
	if cl.Name != "Repo Helper" || cl.TokenEndpointAuthMethod != "client_secret_basic" || cl.AccessTokenFormat != config.TokenOpaque {
		t.Errorf("client = %+v", cl)
	}
	if !slices.Equal(cl.Connectors, []string{"latchkey-demo/github"}) {
		t.Errorf("client connectors = %v", cl.Connectors)
	}
	if !slices.Equal(cl.Resources, []string{"http://127.0.0.1:8071/mcp"}) {
		t.Errorf("client resources = %v", cl.Resources)
	}
	if !slices.Contains(cl.GrantTypes, string(v1alpha1.GrantTokenExchange)) {
		t.Errorf("client grant types = %v", cl.GrantTypes)
	}

	c := p.ConnectorsByAudience["github"]
	if c == nil || c != p.Connectors["latchkey-demo/github"] {
		t.Fatal("connector not indexed by audience github")
	}
	want := config.Connector{
		Key: "latchkey-demo/github", Namespace: ns, Name: "github", DisplayName: "GitHub", Preset: "github",
		Audience: "github", CallbackURL: issuer + "/connectors/latchkey-demo/github/callback",
		AuthURL:     "http://127.0.0.1:8090/login/oauth/authorize",
		TokenURL:    "http://127.0.0.1:8090/login/oauth/access_token",
		UserInfoURL: "http://127.0.0.1:8090/user",
		ClientID:    "latchkey-demo", ClientSecret: "demo-upstream-secret", Scopes: []string{"repo"}, PKCE: true,
		AccountIDField: "id", AccountNameField: "login",
		// The github preset's dialect, from internal/upstream/catalog/presets/github.yaml.
		TokenAuth: config.TokenAuthPost, UserInfoMethod: "GET", RevocationStyle: config.RevokeGitHubGrant,
		// Its account picker, for connecting a further account (docs/several-accounts.md).
		SelectAccountParams: map[string]string{"prompt": "select_account"}, AccountHintParam: "login",
		// The demo Project allows the fake GitHub's loopback address explicitly.
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	}
	// The demo lets agents read the fake GitHub's API through the token proxy, with the github
	// preset's rules, which only read (docs/token-proxy.md).
	got := *c
	if got.Proxy == nil || got.Proxy.BaseURL != "http://127.0.0.1:8090" || len(got.Proxy.Rules) == 0 {
		t.Errorf("connector proxy = %+v, want the fake GitHub's address and the preset's rules", got.Proxy)
	} else {
		for _, r := range got.Proxy.Rules {
			if slices.ContainsFunc(r.Methods, func(m string) bool { return m != http.MethodGet && m != http.MethodHead }) {
				t.Errorf("demo proxy rule %+v admits a method that writes", r)
			}
		}
	}
	got.Proxy = nil
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("connector\n got %+v\nwant %+v", got, want)
	}
}

// TestConnectorSecretMissing: no credential is invented; the Connector says which Secret it
// waits for, and recovers when it appears.
func TestConnectorSecretMissing(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	conn := newConnector(ns, "github", "proj", "gh-app")
	create(t, conn)

	cond := waitNotReady(t, conn, v1alpha1.ConnectorSecretMissingReason)
	if !strings.Contains(cond.Message, ns+"/gh-app") {
		t.Errorf("message %q does not name the Secret %s/gh-app", cond.Message, ns)
	}
	if want := testPublicURL + "/" + ns + "/proj/connectors/" + ns + "/github/callback"; conn.Status.CallbackURL != want {
		t.Errorf("callbackURL = %q, want %q even before the Secret exists", conn.Status.CallbackURL, want)
	}
	waitEvent(t, conn, corev1.EventTypeWarning, v1alpha1.ConnectorSecretMissingReason)
	waitSnapshot(t, "project without the connector", func(s *config.Snapshot) error {
		p := s.Project(ns + "/proj")
		if p == nil {
			return errors.New("no project")
		}
		if len(p.Connectors) != 0 {
			return errors.New("connector compiled without its secret")
		}
		return nil
	})

	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh-app", Labels: forConnector()},
		StringData: map[string]string{"clientSecret": "upstream-secret"},
	})
	waitReady(t, conn)
	waitEvent(t, conn, corev1.EventTypeNormal, v1alpha1.ConnectorReadyReason)
	waitSnapshot(t, "connector compiled", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Connectors[ns+"/github"]
		if c == nil || c.ClientSecret != "upstream-secret" {
			return errors.New("connector missing")
		}
		if c.AuthURL != "https://github.com/login/oauth/authorize" || c.TokenURL != "https://github.com/login/oauth/access_token" || c.UserInfoURL != "https://api.github.com/user" {
			return fmt.Errorf("github preset endpoints not filled: %+v", c)
		}
		return nil
	})

	// A key that is not there is a different problem, reported as such.
	update(t, conn, func(c *v1alpha1.Connector) { c.Spec.ClientSecretRef.Key = "nope" })
	cond = waitNotReady(t, conn, v1alpha1.ConnectorSecretInvalidReason)
	if !strings.Contains(cond.Message, `"nope"`) {
		t.Errorf("message %q does not name the key", cond.Message)
	}
}

// TestOAuthClientCredentials: id and secret written once with an owner reference, kept across
// reconciles, rotation left to the administrator, and public clients get only an id.
func TestOAuthClientCredentials(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	ref := v1alpha1.ProjectReference{Name: "proj"}
	oc := newClient(ns, "agent", ref)
	oc.Spec.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantAuthorizationCode, v1alpha1.GrantRefreshToken, v1alpha1.GrantClientCredentials}
	create(t, oc)
	waitReady(t, oc)

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-credentials"}}
	if err := get(sec); err != nil {
		t.Fatal(err)
	}
	owner := metav1.GetControllerOf(sec)
	if owner == nil || owner.UID != oc.UID || owner.Kind != "OAuthClient" {
		t.Fatalf("Secret controller = %+v, want OAuthClient %s", owner, oc.UID)
	}
	first := string(sec.Data["client_secret"])
	if len(first) < 40 || string(sec.Data["client_id"]) != oc.Status.ClientID {
		t.Fatalf("Secret data: client_id %q, client_secret of %d characters", sec.Data["client_id"], len(first))
	}
	hashIs := func(plain string) func(*config.Snapshot) error {
		return func(s *config.Snapshot) error {
			c := inProject(s, ns+"/proj").Clients[oc.Status.ClientID]
			if c == nil {
				return errors.New("client not compiled")
			}
			if !secret.HashEqual(plain, c.SecretHash) {
				return errors.New("hash is not of the expected secret")
			}
			return nil
		}
	}
	waitSnapshot(t, "client with its secret hash", hashIs(first))

	// A spec change is reconciled without touching the secret.
	update(t, oc, func(o *v1alpha1.OAuthClient) { o.Spec.DisplayName = "Agent, renamed" })
	waitReady(t, oc)
	if err := get(sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["client_secret"]) != first {
		t.Fatal("client secret changed on re-reconcile")
	}

	// The administrator rotates by writing a new secret: it is kept and takes effect.
	rotated := secret.New(secret.PrefixClientSecret)
	update(t, sec, func(s *corev1.Secret) { s.Data["client_secret"] = []byte(rotated) })
	waitSnapshot(t, "rotated secret in force", hashIs(rotated))
	if err := get(sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["client_secret"]) != rotated {
		t.Fatal("the controller overwrote an administrator's rotation")
	}
	// Deleting the key asks for a fresh one.
	update(t, sec, func(s *corev1.Secret) { delete(s.Data, "client_secret") })
	eventually(t, "a new client secret", func() error {
		if err := get(sec); err != nil {
			return err
		}
		if v := string(sec.Data["client_secret"]); v == "" || v == rotated || v == first {
			return errors.New("not regenerated")
		}
		return nil
	})
	waitSnapshot(t, "regenerated secret in force", hashIs(string(sec.Data["client_secret"])))

	// A public client gets an id and nothing else.
	pub := newClient(ns, "cli", ref)
	pub.Spec.TokenEndpointAuthMethod = v1alpha1.AuthNone
	create(t, pub)
	waitReady(t, pub)
	pubSec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cli-credentials"}}
	if err := get(pubSec); err != nil {
		t.Fatal(err)
	}
	if _, ok := pubSec.Data["client_secret"]; ok || string(pubSec.Data["client_id"]) != pub.Status.ClientID {
		t.Fatalf("public client Secret keys: %v", keys(pubSec.Data))
	}
	waitSnapshot(t, "public client without a hash", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Clients[pub.Status.ClientID]
		if c == nil || c.SecretHash != nil || c.TokenEndpointAuthMethod != "none" {
			return fmt.Errorf("public client = %+v", c)
		}
		return nil
	})

	// A pre-created Secret is not adopted: TestTenantCannotTakeOverSecret.

	// Someone else's Secret is not written into.
	thief := newClient(ns, "thief", ref)
	thief.Spec.SecretName = "agent-credentials"
	create(t, thief)
	cond := waitNotReady(t, thief, v1alpha1.OAuthClientSecretConflictReason)
	if !strings.Contains(cond.Message, ns+"/agent-credentials") {
		t.Errorf("message %q does not name the Secret", cond.Message)
	}
	waitSnapshot(t, "conflicting client left out", func(s *config.Snapshot) error {
		if inProject(s, ns+"/proj").Clients[clientIDFor(thief)] != nil {
			return errors.New("compiled")
		}
		return nil
	})
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestAllowedNamespaces: a Project admits other namespaces only as spec.allowedNamespaces says.
func TestAllowedNamespaces(t *testing.T) {
	needEnv(t)
	home := newNamespace(t, nil)
	other := newNamespace(t, nil)
	p := newProject(t, home, "proj", nil)
	ref := v1alpha1.ProjectReference{Name: "proj", Namespace: home}

	oc := newClient(other, "agent", ref)
	create(t, oc)
	cond := waitNotReady(t, oc, v1alpha1.OAuthClientNotAllowedReason)
	if !strings.Contains(cond.Message, home+"/proj") || !strings.Contains(cond.Message, other) {
		t.Errorf("message %q names neither the Project nor the namespace", cond.Message)
	}
	conn := newConnector(other, "github", "proj", "gh-app")
	conn.Spec.ProjectRef = ref
	create(t, conn)
	waitNotReady(t, conn, v1alpha1.ConnectorNotAllowedReason)
	if conn.Status.CallbackURL != "" {
		t.Errorf("callbackURL %q published for a Project that does not admit the Connector", conn.Status.CallbackURL)
	}
	policy := &v1alpha1.RedirectPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "strict"},
		Spec:       v1alpha1.RedirectPolicySpec{ProjectRef: ref, OnlyRecognisedApps: true},
	}
	create(t, policy)
	waitNotReady(t, policy, v1alpha1.RedirectPolicyNotAllowedReason)
	waitSnapshot(t, "nothing from the other namespace", func(s *config.Snapshot) error {
		pr := s.Project(home + "/proj")
		if pr == nil {
			return errors.New("no project")
		}
		if len(pr.Clients) != 0 || pr.Redirects.OnlyRecognisedApps {
			return errors.New("an object from a namespace not admitted was compiled")
		}
		return nil
	})

	update(t, p, func(p *v1alpha1.Project) {
		p.Spec.AllowedNamespaces = &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll}
	})
	waitReady(t, oc)
	waitReady(t, policy)
	waitSnapshot(t, "admitted client and policy", func(s *config.Snapshot) error {
		pr := s.Project(home + "/proj")
		if pr.Clients[oc.Status.ClientID] == nil || !pr.Redirects.OnlyRecognisedApps {
			return errors.New("not compiled yet")
		}
		return nil
	})

	// Selector: admitted exactly while the namespace carries the label.
	update(t, p, func(p *v1alpha1.Project) {
		p.Spec.AllowedNamespaces = &v1alpha1.AllowedNamespaces{
			From:     v1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"latchkey.dev/agents": "yes"}},
		}
	})
	waitNotReady(t, oc, v1alpha1.OAuthClientNotAllowedReason)
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}
	update(t, nsObj, func(n *corev1.Namespace) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["latchkey.dev/agents"] = "yes"
	})
	waitReady(t, oc)
	waitSnapshot(t, "client admitted by selector", func(s *config.Snapshot) error {
		if s.Project(home + "/proj").Clients[oc.Status.ClientID] == nil {
			return errors.New("not compiled")
		}
		return nil
	})
}

// TestCompilerDropsDeleted: deleted objects leave the snapshot.
func TestCompilerDropsDeleted(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	p := newProject(t, ns, "proj", nil)
	oc := newClient(ns, "agent", v1alpha1.ProjectReference{Name: "proj"})
	create(t, oc)
	waitReady(t, oc)
	id := oc.Status.ClientID
	waitSnapshot(t, "client compiled", func(s *config.Snapshot) error {
		if inProject(s, ns+"/proj").Clients[id] == nil {
			return errors.New("not yet")
		}
		return nil
	})
	before := holder.Load().Version

	if err := k8s.Delete(context.Background(), oc); err != nil {
		t.Fatal(err)
	}
	snap := waitSnapshot(t, "client dropped", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil {
			return errors.New("the project is gone too early")
		}
		if pr.Clients[id] != nil {
			return errors.New("still there")
		}
		return nil
	})
	if snap.Version <= before {
		t.Errorf("version %d did not increase past %d", snap.Version, before)
	}

	if err := k8s.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	waitSnapshot(t, "project dropped", func(s *config.Snapshot) error {
		if s.Project(ns+"/proj") != nil {
			return errors.New("still there")
		}
		return nil
	})
}

// TestProjectSecrets: a bad password file turns password sign-in off, not the Project: it stays
// in the snapshot with PasswordsUnavailable (its people are signed out, other tokens keep
// working), says why without quoting the file, takes clients, and is Ready again when fixed.
func TestProjectSecrets(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pw", Labels: forProject()},
		StringData: map[string]string{"passwords.yaml": "- email: bob@example.com\n  hash: hunter2-plain\n"},
	})
	p := &v1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proj"},
		Spec: v1alpha1.ProjectSpec{SignIn: v1alpha1.SignIn{
			PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "passwords.yaml"},
		}},
	}
	create(t, p)
	cond := waitDegraded(t, p, v1alpha1.ProjectSecretInvalidReason)
	if !strings.Contains(cond.Message, ns+"/pw") || strings.Contains(cond.Message, "hunter2") {
		t.Errorf("message %q must name the Secret and never quote a hash", cond.Message)
	}
	if !strings.Contains(cond.Message, "; serving without password sign-in (its people are signed out) until the Secret is fixed") {
		t.Errorf("message %q must end with what is off", cond.Message)
	}
	if p.Status.Issuer == "" {
		t.Error("issuer not reported while degraded")
	}
	oc := newClient(ns, "agent", v1alpha1.ProjectReference{Name: "proj"})
	create(t, oc)
	waitReady(t, oc)
	waitSnapshot(t, "project serving without password sign-in", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil {
			return errors.New("project not in the snapshot")
		}
		if !pr.SignIn.PasswordsUnavailable || len(pr.SignIn.Passwords) != 0 {
			return fmt.Errorf("passwords unavailable %v, %d people", pr.SignIn.PasswordsUnavailable, len(pr.SignIn.Passwords))
		}
		if pr.Clients[oc.Status.ClientID] == nil {
			return errors.New("client not compiled")
		}
		return nil
	})

	update(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pw"}}, func(s *corev1.Secret) {
		s.Data["passwords.yaml"] = []byte(`[{"email": "bob@example.com", "hash": "$2a$10$5ai4.gQFC2HTMrdNoweK0eV.EidIA5.eyvrOffs4Ao4TM7P23dxoe"}]`)
	})
	waitComplete(t, p)
	waitReady(t, oc)
	waitSnapshot(t, "password sign-in back", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil || pr.SignIn.PasswordsUnavailable || len(pr.SignIn.Passwords) != 1 {
			return errors.New("password file not compiled")
		}
		return nil
	})

	// jwt access tokens need the Project's signing keys.
	jwt := newClient(ns, "jwt", v1alpha1.ProjectReference{Name: "proj"})
	jwt.Spec.AccessTokenFormat = v1alpha1.AccessTokenJWT
	create(t, jwt)
	waitNotReady(t, jwt, v1alpha1.OAuthClientSigningKeyRequiredReason)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys", Labels: forProject()},
		Data:       map[string][]byte{"2026-07.pem": testECKeyPEM(t)},
	})
	update(t, p, func(p *v1alpha1.Project) { p.Spec.SigningKeySecretRef = &v1alpha1.SecretReference{Name: "keys"} })
	waitReady(t, jwt)
	waitSnapshot(t, "signing key and jwt client", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil || len(pr.SigningKeys) != 1 || pr.SigningKeys[0].Algorithm != "ES256" || pr.SigningKeys[0].ID != "2026-07.pem" {
			return errors.New("signing key not compiled")
		}
		if c := pr.Clients[jwt.Status.ClientID]; c == nil || c.AccessTokenFormat != config.TokenJWT {
			return errors.New("jwt client not compiled")
		}
		return nil
	})

	// A signing key that no longer parses leaves the Project without keys: the jwt client is
	// refused, the opaque one goes on.
	update(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keys"}}, func(s *corev1.Secret) {
		s.Data["2026-07.pem"] = []byte("not a key")
	})
	cond = waitDegraded(t, p, v1alpha1.ProjectSecretInvalidReason)
	if !strings.Contains(cond.Message, "; serving without JWT signing keys until") {
		t.Errorf("message %q must end with what is off", cond.Message)
	}
	waitNotReady(t, jwt, v1alpha1.OAuthClientSigningKeyRequiredReason)
	waitReady(t, oc)
	waitSnapshot(t, "no signing keys, opaque client kept", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil || len(pr.SigningKeys) != 0 {
			return errors.New("signing keys still compiled")
		}
		if pr.Clients[jwt.Status.ClientID] != nil || pr.Clients[oc.Status.ClientID] == nil {
			return errors.New("want the opaque client only")
		}
		return nil
	})
}

// TestProjectSecretsTurnOffFeatures: each broken Secret turns off what needs it; the condition
// lists every problem and what is off, and attached objects stay Ready.
func TestProjectSecretsTurnOffFeatures(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	create(t, passwordSecret(ns, "pw"))
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hmac", Labels: forProject()},
		StringData: map[string]string{"good": strings.Repeat("k", 32), "short": "too-short-key-value"},
	})
	sink := func(name, key string) v1alpha1.EventSink {
		return v1alpha1.EventSink{Name: name, URL: v1alpha1.EndpointURL("https://siem.example.com/" + name), HMACSecretRef: v1alpha1.SecretKeyReference{Name: "hmac", Key: key}}
	}
	p := &v1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proj"},
		Spec: v1alpha1.ProjectSpec{
			SignIn: v1alpha1.SignIn{
				PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "passwords.yaml"},
				OIDC: &v1alpha1.OIDCSignIn{
					Issuer: "https://idp.example.com", ClientID: "latchkey",
					ClientSecretRef:     v1alpha1.SecretKeyReference{Name: "oidc", Key: "clientSecret"},
					AllowedEmailDomains: []v1alpha1.EmailDomain{"example.com"},
					AllowedGroups:       []v1alpha1.SignInGroup{"staff"},
				},
			},
			Registration: &v1alpha1.Registration{
				Mode:                        v1alpha1.RegistrationInitialAccessToken,
				InitialAccessTokenSecretRef: &v1alpha1.SecretReference{Name: "iat"},
			},
			EventSinks: []v1alpha1.EventSink{sink("siem", "good"), sink("audit", "short")},
		},
	}
	create(t, p)
	cond := waitDegraded(t, p, v1alpha1.ProjectSecretMissingReason)
	for _, want := range []string{ns + "/oidc", ns + "/iat", ns + "/hmac"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("message %q does not name %s", cond.Message, want)
		}
	}
	if strings.Contains(cond.Message, "too-short") {
		t.Errorf("message %q quotes a key", cond.Message)
	}
	if want := `; serving without OIDC sign-in, client registration, event sink "audit" until`; !strings.Contains(cond.Message, want) {
		t.Errorf("message %q must end with %q", cond.Message, want)
	}
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh", Labels: forConnector()},
		StringData: map[string]string{"clientSecret": "gh-secret"},
	})
	conn := newConnector(ns, "github", "proj", "gh")
	create(t, conn)
	oc := newClient(ns, "agent", v1alpha1.ProjectReference{Name: "proj"})
	create(t, oc)
	waitReady(t, conn)
	waitReady(t, oc)
	waitSnapshot(t, "project with features off", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil {
			return errors.New("project not in the snapshot")
		}
		if o := pr.SignIn.OIDC; o == nil || !o.Unavailable || o.Issuer != "https://idp.example.com" || o.ClientSecret != "" {
			return fmt.Errorf("oidc %+v", o)
		}
		// Who may sign in stays compiled while the provider is unavailable: it narrows, it
		// never opens.
		if o := pr.SignIn.OIDC; !slices.Equal(o.AllowedEmailDomains, []string{"example.com"}) ||
			!slices.Equal(o.AllowedGroups, []string{"staff"}) || o.GroupsClaim != "groups" {
			return fmt.Errorf("oidc allowed %+v", o)
		}
		if pr.SignIn.PasswordsUnavailable || len(pr.SignIn.Passwords) != 1 {
			return errors.New("password sign-in affected")
		}
		if pr.Registration.Mode != config.RegistrationInitialAccessToken || len(pr.Registration.InitialAccessTokenHashes) != 0 {
			return fmt.Errorf("registration %+v", pr.Registration)
		}
		if len(pr.EventSinks) != 2 || pr.EventSinks[0].Unavailable || len(pr.EventSinks[0].HMACKey) != 32 ||
			!pr.EventSinks[1].Unavailable || pr.EventSinks[1].HMACKey != nil {
			return fmt.Errorf("event sinks %+v", pr.EventSinks)
		}
		if pr.Clients[oc.Status.ClientID] == nil || pr.Connectors[ns+"/github"] == nil {
			return errors.New("client or connector not attached")
		}
		return nil
	})

	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "oidc", Labels: forProject()},
		StringData: map[string]string{"clientSecret": "idp-secret"},
	})
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "iat", Labels: forProject()},
		StringData: map[string]string{"a": "lk_iat_token"},
	})
	update(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hmac"}}, func(s *corev1.Secret) {
		s.Data["short"] = []byte(strings.Repeat("s", 32))
	})
	waitComplete(t, p)
	waitSnapshot(t, "every feature back", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if pr == nil || pr.SignIn.OIDC == nil || pr.SignIn.OIDC.Unavailable || pr.SignIn.OIDC.ClientSecret != "idp-secret" ||
			len(pr.Registration.InitialAccessTokenHashes) != 1 || len(pr.EventSinks) != 2 || pr.EventSinks[1].Unavailable {
			return errors.New("not yet")
		}
		return nil
	})
}

// TestProjectBrokenSinkSecretIsDegraded: a Project whose event sink key is missing serves, so it
// is Ready=True, and says what is off with Degraded=True (a Warning Event too), which is what
// GitOps tools read as "serving, needs attention" rather than "failed"; a key too short is
// SecretInvalid; a good key turns Degraded=False.
func TestProjectBrokenSinkSecretIsDegraded(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	create(t, passwordSecret(ns, "pw"))
	p := &v1alpha1.Project{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proj"},
		Spec: v1alpha1.ProjectSpec{
			SignIn: v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "passwords.yaml"}},
			EventSinks: []v1alpha1.EventSink{{
				Name: "siem", URL: "https://siem.example.com/in",
				HMACSecretRef: v1alpha1.SecretKeyReference{Name: "sink", Key: "key"},
			}}},
	}
	create(t, p)
	cond := waitDegraded(t, p, v1alpha1.ProjectSecretMissingReason)
	if !strings.Contains(cond.Message, ns+"/sink") || !strings.Contains(cond.Message, `serving without event sink "siem" until the Secret is fixed`) {
		t.Errorf("message %q must name the Secret, what is off and how it comes back", cond.Message)
	}
	waitEvent(t, p, corev1.EventTypeWarning, v1alpha1.ProjectSecretMissingReason)
	if status, msg := health(t, p); status != "Degraded" || !strings.HasPrefix(msg, "SecretMissing: ") {
		t.Errorf("Argo CD health %s (%q), want Degraded with the reason", status, msg)
	}

	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sink", Labels: forProject()},
		StringData: map[string]string{"key": "short"},
	})
	cond = waitDegraded(t, p, v1alpha1.ProjectSecretInvalidReason)
	if strings.Contains(cond.Message, "short\"") {
		t.Errorf("message %q quotes the key", cond.Message)
	}

	update(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sink"}}, func(s *corev1.Secret) {
		s.Data["key"] = []byte(strings.Repeat("k", 32))
	})
	waitComplete(t, p)
	if status, msg := health(t, p); status != "Healthy" {
		t.Errorf("Argo CD health %s (%q), want Healthy", status, msg)
	}
}

// TestConnectorRules: the audience rule and connector references from clients.
func TestConnectorRules(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh-app", Labels: forConnector()},
		StringData: map[string]string{"clientSecret": "s"},
	})
	first := newConnector(ns, "a-github", "proj", "gh-app")
	create(t, first)
	waitReady(t, first)
	second := newConnector(ns, "b-github", "proj", "gh-app")
	create(t, second)
	cond := waitNotReady(t, second, v1alpha1.ConnectorAudienceConflictReason)
	if !strings.Contains(cond.Message, ns+"/a-github") {
		t.Errorf("message %q does not name the Connector holding the audience", cond.Message)
	}

	oc := newClient(ns, "agent", v1alpha1.ProjectReference{Name: "proj"})
	oc.Spec.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantAuthorizationCode, v1alpha1.GrantTokenExchange}
	oc.Spec.Connectors = []v1alpha1.ConnectorName{"a-github", "b-github", "missing"}
	create(t, oc)
	waitReady(t, oc)
	cc := waitCondition(t, oc, v1alpha1.OAuthClientConnectorsResolvedCondition, metav1.ConditionFalse, v1alpha1.OAuthClientConnectorNotFoundReason)
	if !strings.Contains(cc.Message, ns+"/missing") || !strings.Contains(cc.Message, ns+"/b-github") {
		t.Errorf("ConnectorsResolved message %q", cc.Message)
	}
	// It serves with the one that resolved: Ready, and Degraded with the same reason.
	if dc := waitDegraded(t, oc, v1alpha1.OAuthClientConnectorNotFoundReason); !strings.Contains(dc.Message, ns+"/missing") ||
		!strings.Contains(dc.Message, "serving with 1 of 3 connectors usable") {
		t.Errorf("Degraded message %q", dc.Message)
	}
	if status, _ := health(t, oc); status != "Degraded" {
		t.Errorf("Argo CD health %s, want Degraded", status)
	}
	waitSnapshot(t, "client with the one usable connector", func(s *config.Snapshot) error {
		c := inProject(s, ns+"/proj").Clients[oc.Status.ClientID]
		if c == nil || !slices.Equal(c.Connectors, []string{ns + "/a-github"}) {
			return fmt.Errorf("client = %+v", c)
		}
		return nil
	})

	// The older Connector goes: the younger takes the audience, and the client its place.
	if err := k8s.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	waitReady(t, second)
	waitSnapshot(t, "audience handed over", func(s *config.Snapshot) error {
		pr := s.Project(ns + "/proj")
		if c := pr.ConnectorsByAudience["github"]; c == nil || c.Name != "b-github" {
			return errors.New("not yet")
		}
		if c := pr.Clients[oc.Status.ClientID]; c == nil || !slices.Equal(c.Connectors, []string{ns + "/b-github"}) {
			return fmt.Errorf("client = %+v", c)
		}
		return nil
	})
}

// TestValidation: the API server refuses bad objects, and its message names the field.
func TestValidation(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	project := func(mut func(*v1alpha1.ProjectSpec)) client.Object {
		p := &v1alpha1.Project{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p-" + randomSuffix()},
			Spec: v1alpha1.ProjectSpec{SignIn: v1alpha1.SignIn{PasswordSecretRef: &v1alpha1.SecretKeyReference{Name: "pw", Key: "k"}}}}
		mut(&p.Spec)
		return p
	}
	oauthClient := func(mut func(*v1alpha1.OAuthClientSpec)) client.Object {
		c := newClient(ns, "c-"+randomSuffix(), v1alpha1.ProjectReference{Name: "proj"})
		mut(&c.Spec)
		return c
	}
	redirect := func(uris ...v1alpha1.RedirectURI) client.Object {
		return oauthClient(func(s *v1alpha1.OAuthClientSpec) { s.RedirectURIs = uris })
	}
	connector := func(mut func(*v1alpha1.ConnectorSpec)) client.Object {
		c := newConnector(ns, "k-"+randomSuffix(), "proj", "s")
		mut(&c.Spec)
		return c
	}
	dur := func(s string) *metav1.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: d}
	}

	tests := []struct {
		name string
		obj  client.Object
		// want are substrings of the error; empty means the object is valid.
		want []string
	}{
		{"redirect with a fragment", redirect("https://app.example.com/cb#x"), []string{"spec.redirectURIs[0]", "must not contain a fragment"}},
		{"default language not shipped", project(func(s *v1alpha1.ProjectSpec) { s.DefaultLanguage = "nl" }), []string{"spec.defaultLanguage", "Unsupported value"}},
		{"default language as a region", project(func(s *v1alpha1.ProjectSpec) { s.DefaultLanguage = "de-DE" }), []string{"spec.defaultLanguage", "Unsupported value"}},
		{"default language German", project(func(s *v1alpha1.ProjectSpec) { s.DefaultLanguage = "de" }), nil},
		{"relative redirect", redirect("/callback"), []string{"spec.redirectURIs[0]", "must be absolute"}},
		{"http redirect to another host", redirect("http://app.example.com/cb"), []string{"spec.redirectURIs[0]", "http is allowed only to a loopback host"}},
		{"http redirect in capitals", redirect("HTTP://app.example.com/cb"), []string{"spec.redirectURIs[0]", "must be absolute"}},
		{"http loopback via userinfo", redirect("http://127.0.0.1@evil.example/cb"), []string{"spec.redirectURIs[0]", "loopback"}},
		{"second redirect checked too", redirect("https://ok.example/cb", "ftp://x.example/cb"), []string{"spec.redirectURIs[1]", "must be absolute"}},
		{"http resource to another host", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.Resources = []v1alpha1.ResourceURI{"http://mcp.example.com/mcp"}
		}), []string{"spec.resources[0]", "https://"}},
		{"https resource", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.Resources = []v1alpha1.ResourceURI{"https://mcp.example.com/mcp"}
		}), nil},
		{"resource sharing selector missing", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.ResourceSharing = &v1alpha1.AllowedClientNamespaces{From: v1alpha1.NamespacesFromSelector}
		}), []string{"spec.resourceSharing", "selector is required when from is Selector"}},
		{"valid: resources shared with every namespace", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.Resources = []v1alpha1.ResourceURI{"https://mcp.example.com/mcp"}
			s.ResourceSharing = &v1alpha1.AllowedClientNamespaces{From: v1alpha1.NamespacesFromAll}
		}), nil},
		{"authorization_code without redirects", oauthClient(func(s *v1alpha1.OAuthClientSpec) { s.RedirectURIs = nil }), []string{"redirectURIs: grant type authorization_code needs at least one redirect URI"}},
		{"client_credentials on a public client", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.TokenEndpointAuthMethod = v1alpha1.AuthNone
			s.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantAuthorizationCode, v1alpha1.GrantClientCredentials}
		}), []string{"grantTypes: client_credentials needs a confidential client"}},
		{"unknown grant type", oauthClient(func(s *v1alpha1.OAuthClientSpec) { s.GrantTypes = []v1alpha1.GrantType{"password"} }), []string{"spec.grantTypes[0]", "Unsupported value"}},
		{"connector with neither preset nor endpoints", connector(func(s *v1alpha1.ConnectorSpec) { s.Preset = "" }), []string{"endpoints: a Connector without a preset or apiKey needs endpoints.authorizationURL"}},
		{"valid: an API-key connector", connector(func(s *v1alpha1.ConnectorSpec) {
			s.Preset, s.ClientID, s.ClientSecretRef = "", "", v1alpha1.SecretKeyReference{}
			s.APIKey = &v1alpha1.ConnectorAPIKey{CheckURL: "https://api.example.com/me", Header: "X-Api-Key"}
		}), nil},
		{"API-key connector with OAuth fields", connector(func(s *v1alpha1.ConnectorSpec) {
			s.APIKey = &v1alpha1.ConnectorAPIKey{CheckURL: "https://api.example.com/me"}
		}), []string{"apiKey: an API-key Connector has no preset, endpoints, clientID, clientSecretRef"}},
		{"OAuth connector without a client", connector(func(s *v1alpha1.ConnectorSpec) { s.ClientID = "" }), []string{"clientID and clientSecretRef are required unless apiKey is set"}},
		{"API-key check URL over http", connector(func(s *v1alpha1.ConnectorSpec) {
			s.Preset, s.ClientID, s.ClientSecretRef = "", "", v1alpha1.SecretKeyReference{}
			s.APIKey = &v1alpha1.ConnectorAPIKey{CheckURL: "http://api.example.com/me"}
		}), []string{"spec.apiKey.checkURL", "must be an absolute https URL"}},
		{"API-key format without the key", connector(func(s *v1alpha1.ConnectorSpec) {
			s.Preset, s.ClientID, s.ClientSecretRef = "", "", v1alpha1.SecretKeyReference{}
			s.APIKey = &v1alpha1.ConnectorAPIKey{CheckURL: "https://api.example.com/me", Format: "Bearer"}
		}), []string{"apiKey.format must hold {key} exactly once"}},
		{"API-key header owned by HTTP", connector(func(s *v1alpha1.ConnectorSpec) {
			s.Preset, s.ClientID, s.ClientSecretRef = "", "", v1alpha1.SecretKeyReference{}
			s.APIKey = &v1alpha1.ConnectorAPIKey{CheckURL: "https://api.example.com/me", Header: "Cookie"}
		}), []string{"apiKey.header must not be"}},
		{"generic connector without user info", connector(func(s *v1alpha1.ConnectorSpec) {
			s.Preset = ""
			s.Endpoints = &v1alpha1.ConnectorEndpoints{AuthorizationURL: "https://idp.example/auth", TokenURL: "https://idp.example/token"}
		}), []string{"endpoints.userInfoURL or endpoints.oidcIssuer"}},
		{"connector endpoint over http", connector(func(s *v1alpha1.ConnectorSpec) {
			s.Endpoints = &v1alpha1.ConnectorEndpoints{TokenURL: "http://idp.example/token"}
		}), []string{"spec.endpoints.tokenURL", "must be an absolute https URL"}},
		{"connector preset not a name", connector(func(s *v1alpha1.ConnectorSpec) { s.Preset = "GitHub!" }), []string{"spec.preset", "should match"}},
		{"connector header owned by Latchkey", connector(func(s *v1alpha1.ConnectorSpec) {
			s.Headers = map[string]v1alpha1.HeaderValue{"authorization": "Bearer stolen"}
		}), []string{"spec.headers", "must not set Authorization"}},
		{"connector scopeParameter taking over redirect_uri", connector(func(s *v1alpha1.ConnectorSpec) { s.ScopeParameter = "redirect_uri" }), []string{"spec.scopeParameter"}},
		{"connector GET user info with a body", connector(func(s *v1alpha1.ConnectorSpec) {
			s.UserInfo = &v1alpha1.ConnectorUserInfo{Method: "GET", GraphQLQuery: "{ viewer { id } }"}
		}), []string{"a GET request has no body"}},
		{"connector unknown auth method", connector(func(s *v1alpha1.ConnectorSpec) { s.TokenEndpointAuthMethod = "tls_client_auth" }), []string{"spec.tokenEndpointAuthMethod", "Unsupported value"}},
		{"connector authParams overriding redirect_uri", connector(func(s *v1alpha1.ConnectorSpec) {
			s.AuthParams = map[string]v1alpha1.AuthParamValue{"redirect_uri": "https://evil.example/"}
		}), []string{"spec.authParams", "must not set"}},
		{"absurd recentSignIn", project(func(s *v1alpha1.ProjectSpec) { s.Lifetimes = &v1alpha1.Lifetimes{RecentSignIn: dur("9999h")} }), []string{"spec.lifetimes.recentSignIn", "lifetimes.recentSignIn must be between 1m and 24h"}},
		{"absurd link lifetime", project(func(s *v1alpha1.ProjectSpec) { s.Lifetimes = &v1alpha1.Lifetimes{Link: dur("1s")} }), []string{"lifetimes.link must be between 1m and 24h"}},
		{"recheckInterval under a minute", project(func(s *v1alpha1.ProjectSpec) {
			s.SignIn.OIDC = &v1alpha1.OIDCSignIn{Issuer: "https://idp.example", ClientID: "latchkey",
				ClientSecretRef: v1alpha1.SecretKeyReference{Name: "idp", Key: "secret"}, RecheckInterval: dur("30s")}
		}), []string{"oidc.recheckInterval must be between 1m and 24h"}},
		{"allowed email domain with an @", project(func(s *v1alpha1.ProjectSpec) {
			s.SignIn.OIDC = &v1alpha1.OIDCSignIn{Issuer: "https://idp.example", ClientID: "latchkey",
				ClientSecretRef: v1alpha1.SecretKeyReference{Name: "idp", Key: "secret"}, AllowedEmailDomains: []v1alpha1.EmailDomain{"example.com", "@example.com"}}
		}), []string{"spec.signIn.oidc.allowedEmailDomains[1]", "should match"}},
		{"allowed email domain as a wildcard", project(func(s *v1alpha1.ProjectSpec) {
			s.SignIn.OIDC = &v1alpha1.OIDCSignIn{Issuer: "https://idp.example", ClientID: "latchkey",
				ClientSecretRef: v1alpha1.SecretKeyReference{Name: "idp", Key: "secret"}, AllowedEmailDomains: []v1alpha1.EmailDomain{"*.example.com"}}
		}), []string{"spec.signIn.oidc.allowedEmailDomains[0]", "should match"}},
		{"allowed email domain in capitals", project(func(s *v1alpha1.ProjectSpec) {
			s.SignIn.OIDC = &v1alpha1.OIDCSignIn{Issuer: "https://idp.example", ClientID: "latchkey",
				ClientSecretRef: v1alpha1.SecretKeyReference{Name: "idp", Key: "secret"}, AllowedEmailDomains: []v1alpha1.EmailDomain{"Example.com"}}
		}), []string{"spec.signIn.oidc.allowedEmailDomains[0]", "should match"}},
		{"no way to sign in", project(func(s *v1alpha1.ProjectSpec) { s.SignIn = v1alpha1.SignIn{} }), []string{"signIn must set passwordSecretRef, oidc, or both"}},
		{"selector missing", project(func(s *v1alpha1.ProjectSpec) {
			s.AllowedNamespaces = &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromSelector}
		}), []string{"allowedNamespaces.selector is required when allowedNamespaces.from is Selector"}},
		{"initial access tokens without a Secret", project(func(s *v1alpha1.ProjectSpec) {
			s.Registration = &v1alpha1.Registration{Mode: v1alpha1.RegistrationInitialAccessToken}
		}), []string{"registration.initialAccessTokenSecretRef is required"}},
		{"event sink over http", project(func(s *v1alpha1.ProjectSpec) {
			s.EventSinks = []v1alpha1.EventSink{{Name: "siem", URL: "http://siem.example/hook", HMACSecretRef: v1alpha1.SecretKeyReference{Name: "h", Key: "k"}}}
		}), []string{"spec.eventSinks[0].url", "must be an absolute https URL"}},

		{"upstream network not a CIDR", project(func(s *v1alpha1.ProjectSpec) {
			s.UpstreamNetwork = &v1alpha1.UpstreamNetwork{AllowedCIDRs: []v1alpha1.CIDR{"dex.auth.svc"}}
		}), []string{"spec.upstreamNetwork.allowedCIDRs[0]", "must be an address range in CIDR notation"}},
		{"upstream network opening cloud metadata", project(func(s *v1alpha1.ProjectSpec) {
			s.UpstreamNetwork = &v1alpha1.UpstreamNetwork{AllowedCIDRs: []v1alpha1.CIDR{"10.96.0.0/12", "169.254.169.254/32"}}
		}), []string{"spec.upstreamNetwork.allowedCIDRs[1]", "must not be a link-local range"}},
		{"upstream network opening IPv6 link-local", project(func(s *v1alpha1.ProjectSpec) {
			s.UpstreamNetwork = &v1alpha1.UpstreamNetwork{AllowedCIDRs: []v1alpha1.CIDR{"fe80::/10"}}
		}), []string{"must not be a link-local range"}},
		{"valid: upstream network for an in-cluster provider", project(func(s *v1alpha1.ProjectSpec) {
			s.UpstreamNetwork = &v1alpha1.UpstreamNetwork{AllowedCIDRs: []v1alpha1.CIDR{"10.96.12.34/32", "fd00:10:96::/112", "127.0.0.1/32"}}
		}), nil},
		{"upstream network grant to nobody", project(func(s *v1alpha1.ProjectSpec) {
			s.UpstreamNetwork = &v1alpha1.UpstreamNetwork{Grants: []v1alpha1.UpstreamNetworkGrant{{CIDRs: []v1alpha1.CIDR{"10.96.40.7/32"}}}}
		}), []string{"a grant names connectors, namespaces, or both"}},
		{"upstream network grant opening cloud metadata", project(func(s *v1alpha1.ProjectSpec) {
			s.UpstreamNetwork = &v1alpha1.UpstreamNetwork{Grants: []v1alpha1.UpstreamNetworkGrant{
				{CIDRs: []v1alpha1.CIDR{"169.254.169.254/32"}, Connectors: []v1alpha1.ConnectorName{"team-b/keycloak"}}}}
		}), []string{"spec.upstreamNetwork.grants[0].cidrs[0]", "must not be a link-local range"}},
		{"upstream network grant selector missing", project(func(s *v1alpha1.ProjectSpec) {
			s.UpstreamNetwork = &v1alpha1.UpstreamNetwork{Grants: []v1alpha1.UpstreamNetworkGrant{
				{CIDRs: []v1alpha1.CIDR{"10.96.40.7/32"}, Namespaces: &v1alpha1.AllowedClientNamespaces{From: v1alpha1.NamespacesFromSelector}}}}
		}), []string{"selector is required when from is Selector"}},
		{"valid: upstream network grants", project(func(s *v1alpha1.ProjectSpec) {
			s.UpstreamNetwork = &v1alpha1.UpstreamNetwork{Grants: []v1alpha1.UpstreamNetworkGrant{
				{CIDRs: []v1alpha1.CIDR{"10.96.40.7/32"}, Connectors: []v1alpha1.ConnectorName{"team-b/keycloak", "dex"}},
				{CIDRs: []v1alpha1.CIDR{"10.96.50.0/24"}, Namespaces: &v1alpha1.AllowedClientNamespaces{From: v1alpha1.NamespacesFromAll}},
			}}
		}), nil},
		{"identity assertion issuer with both jwksURI and jwks", project(func(s *v1alpha1.ProjectSpec) {
			s.IdentityAssertions = &v1alpha1.IdentityAssertions{TrustedIssuers: []v1alpha1.TrustedAssertionIssuer{{
				Issuer: "https://idp.example", JWKSURI: "https://idp.example/keys", JWKS: `{"keys":[]}`, Clients: []string{"a"}}}}
		}), []string{"set exactly one of jwksURI and jwks"}},
		{"identity assertions by email without domains", project(func(s *v1alpha1.ProjectSpec) {
			s.IdentityAssertions = &v1alpha1.IdentityAssertions{TrustedIssuers: []v1alpha1.TrustedAssertionIssuer{{
				Issuer: "https://idp.example", JWKSURI: "https://idp.example/keys", Clients: []string{"a"}, Subject: v1alpha1.AssertionSubjectEmail}}}
		}), []string{"emailDomains is required when subject is email"}},
		{"identity assertion clients: * with others", project(func(s *v1alpha1.ProjectSpec) {
			s.IdentityAssertions = &v1alpha1.IdentityAssertions{TrustedIssuers: []v1alpha1.TrustedAssertionIssuer{{
				Issuer: "https://idp.example", JWKSURI: "https://idp.example/keys", Clients: []string{"*", "a"}}}}
		}), []string{"'*' stands alone"}},
		{"identity assertion issuer over http", project(func(s *v1alpha1.ProjectSpec) {
			s.IdentityAssertions = &v1alpha1.IdentityAssertions{TrustedIssuers: []v1alpha1.TrustedAssertionIssuer{{
				Issuer: "http://idp.example", JWKSURI: "https://idp.example/keys", Clients: []string{"a"}}}}
		}), []string{"spec.identityAssertions.trustedIssuers[0].issuer", "must be an absolute https URL"}},
		{"ID-JAG lifetime too long", project(func(s *v1alpha1.ProjectSpec) {
			s.IdentityAssertions = &v1alpha1.IdentityAssertions{Lifetime: dur("1h")}
		}), []string{"identityAssertions.lifetime must be between 30s and 10m"}},
		{"valid: identity assertions both ways", project(func(s *v1alpha1.ProjectSpec) {
			s.IdentityAssertions = &v1alpha1.IdentityAssertions{
				TrustedIssuers: []v1alpha1.TrustedAssertionIssuer{{Issuer: "https://idp.example", JWKSURI: "https://idp.example/keys",
					Clients: []string{"*"}, Subject: v1alpha1.AssertionSubjectEmail, EmailDomains: []string{"acme.example"}}},
				Audiences: []v1alpha1.AssertionAudience{{Issuer: "https://as.vendor.example",
					Clients: []v1alpha1.AssertionAudienceClient{{ClientID: "chat"}}}},
			}
		}), nil},
		{"valid: jwt-bearer grant", oauthClient(func(s *v1alpha1.OAuthClientSpec) {
			s.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantAuthorizationCode, v1alpha1.GrantJWTBearer}
		}), nil},
		{"valid: loopback, IPv6 loopback, app scheme", redirect("http://127.0.0.1:8070/callback", "http://[::1]:9000/cb", "http://localhost/cb", "com.example.app:/callback", "https://claude.ai/api/mcp/auth_callback"), nil},
		{"valid: lifetimes at their bounds", project(func(s *v1alpha1.ProjectSpec) {
			s.Lifetimes = &v1alpha1.Lifetimes{RecentSignIn: dur("24h"), RefreshGrace: dur("0s"), AuthCode: dur("10s")}
		}), nil},
		{"valid: github preset pointed at loopback", connector(func(s *v1alpha1.ConnectorSpec) {
			s.Endpoints = &v1alpha1.ConnectorEndpoints{TokenURL: "http://127.0.0.1:8090/login/oauth/access_token"}
		}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := k8s.Create(context.Background(), tt.obj, client.DryRunAll)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused a valid object: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error is not Invalid: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestOAuthClientRedirectLookAlikes: redirect URIs the CRD's CEL accepts but the server's shared
// check refuses (the same check dynamic registration applies) keep the client out of service,
// with a reason that names the field; fixing the URI brings it back.
func TestOAuthClientRedirectLookAlikes(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	for i, uri := range []v1alpha1.RedirectURI{"https://claude.ai@evil.example/cb", "Com.Example.App:/cb"} {
		oc := newClient(ns, fmt.Sprintf("lookalike-%d", i), v1alpha1.ProjectReference{Name: "proj"})
		oc.Spec.RedirectURIs = []v1alpha1.RedirectURI{"https://ok.example/cb", uri}
		create(t, oc)
		cond := waitNotReady(t, oc, v1alpha1.OAuthClientInvalidRedirectURIReason)
		if !strings.Contains(cond.Message, "spec.redirectURIs[1]") {
			t.Errorf("%s: message %q does not name spec.redirectURIs[1]", uri, cond.Message)
		}
		update(t, oc, func(c *v1alpha1.OAuthClient) { c.Spec.RedirectURIs = c.Spec.RedirectURIs[:1] })
		waitReady(t, oc)
	}
}

// TestLargeSecretTypesNotCached: the operator keeps only the metadata of Secret types that never
// hold what it reads (here a Helm release), so a Connector pointed at one reports SecretInvalid
// rather than reading a value the cache does not hold.
func TestLargeSecretTypesNotCached(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sh.helm.release.v1.app.v1", Labels: forConnector()},
		Type:       "helm.sh/release.v1",
		Data:       map[string][]byte{"clientSecret": []byte("not-for-latchkey")},
	})
	conn := newConnector(ns, "github", "proj", "sh.helm.release.v1.app.v1")
	create(t, conn)
	waitNotReady(t, conn, v1alpha1.ConnectorSecretInvalidReason)
}

// TestOAuthClientEvents: an OAuthClient records a Warning Event when it cannot be used and a
// Normal one when it recovers, but none when it is simply Ready from the start (thousands of
// clients applied at once would write thousands of Events saying what status says).
func TestOAuthClientEvents(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	early := newClient(ns, "early", v1alpha1.ProjectReference{Name: "proj"})
	create(t, early)
	waitEvent(t, early, corev1.EventTypeWarning, v1alpha1.ProjectNotFoundReason)

	newProject(t, ns, "proj", nil)
	waitReady(t, early)
	waitEvent(t, early, corev1.EventTypeNormal, v1alpha1.OAuthClientReadyReason)

	ready := newClient(ns, "ready", v1alpha1.ProjectReference{Name: "proj"})
	create(t, ready)
	waitReady(t, ready)
	// Events are written asynchronously: let a later one for another object arrive first.
	later := newClient(ns, "later", v1alpha1.ProjectReference{Name: "missing"})
	create(t, later)
	waitEvent(t, later, corev1.EventTypeWarning, v1alpha1.ProjectNotFoundReason)
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.UID == ready.UID {
			t.Errorf("an OAuthClient Ready from the start recorded %s %s: %s", e.Type, e.Reason, e.Note)
		}
	}
}
