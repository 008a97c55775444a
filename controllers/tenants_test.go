//go:build !latchkey_local

package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
)

// The tenant boundary: a team that may create OAuthClients, Connectors (and, where an
// administrator lets it, RedirectPolicies) in its own namespace cannot use them to reach a Secret
// it could not write, another team's Connector, or the Project's list of recognised
// destinations. Each test plays that team.

// TestTenantCannotTakeOverSecret: naming a Secret nobody owns in spec.secretName does not hand
// it to the tenant: Latchkey reports SecretConflict, records a Warning Event, and changes not a
// byte of it (no owner reference, so deleting the OAuthClient cannot garbage-collect it).
func TestTenantCannotTakeOverSecret(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	newProject(t, ns, "proj", nil)
	ref := v1alpha1.ProjectReference{Name: "proj"}

	// Another component's Secret in the same namespace, with keys named like Latchkey's.
	victim := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payments-api", Labels: map[string]string{"app": "payments"}},
		Data: map[string][]byte{
			"client_id":     []byte("payments-prod"),
			"client_secret": []byte("the-payments-team-upstream-secret-0123456789"),
			"db_password":   []byte("s3cret"),
		},
	}
	create(t, victim)
	want := victim.DeepCopy()

	for _, public := range []bool{true, false} {
		oc := newClient(ns, fmt.Sprintf("thief-public-%t", public), ref)
		oc.Spec.SecretName = victim.Name
		if public {
			oc.Spec.TokenEndpointAuthMethod = v1alpha1.AuthNone
		}
		create(t, oc)
		cond := waitNotReady(t, oc, v1alpha1.OAuthClientSecretConflictReason)
		if !strings.Contains(cond.Message, ns+"/payments-api") {
			t.Errorf("message %q does not name the Secret", cond.Message)
		}
		waitEvent(t, oc, corev1.EventTypeWarning, v1alpha1.OAuthClientSecretConflictReason)
		waitSnapshot(t, "the client is not compiled from a Secret it does not own", func(s *config.Snapshot) error {
			pr := s.Project(ns + "/proj")
			if pr == nil {
				// The compiler may publish the namespace's Project after the client's reconcile.
				return errors.New("project not compiled yet")
			}
			if pr.Clients[clientIDFor(oc)] != nil {
				return errors.New("compiled")
			}
			return nil
		})
	}
	got := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: victim.Name}}
	if err := get(got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != want.ResourceVersion || len(got.OwnerReferences) != 0 ||
		!maps.Equal(got.Labels, want.Labels) || !maps.EqualFunc(got.Data, want.Data, bytes.Equal) {
		t.Fatalf("the Secret was written: resourceVersion %s (was %s), owners %v, labels %v, keys %v",
			got.ResourceVersion, want.ResourceVersion, got.OwnerReferences, got.Labels, keys(got.Data))
	}

	// A Secret Latchkey created for a client, as every earlier version labelled and owned it,
	// stays managed: removing its client_secret has a new one generated.
	oc := newClient(ns, "agent", ref)
	create(t, oc)
	waitReady(t, oc)
	mine := &corev1.Secret{}
	mine.Namespace, mine.Name = ns, "agent-credentials"
	update(t, mine, func(s *corev1.Secret) { delete(s.Data, "client_secret") })
	eventually(t, "a new client secret in Latchkey's own Secret", func() error {
		if err := get(mine); err != nil {
			return err
		}
		if len(mine.Data["client_secret"]) == 0 {
			return errors.New("not regenerated")
		}
		return nil
	})
	waitReady(t, oc)
}

// TestTenantCannotUseOtherTeamsConnector: team-b lists team-a's Connector in its OAuthClient.
// Until team-a grants team-b's namespace, the client reports ConnectorNotAllowed naming the
// Connector, and the compiled client may not exchange tokens for it.
func TestTenantCannotUseOtherTeamsConnector(t *testing.T) {
	needEnv(t)
	teamA := newNamespace(t, nil)
	teamB := newNamespace(t, nil)
	newProject(t, teamA, "proj", &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll})
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "gh-app", Labels: forConnector()},
		StringData: map[string]string{"clientSecret": "upstream-secret"},
	})
	conn := newConnector(teamA, "github", "proj", "gh-app")
	create(t, conn)
	waitReady(t, conn)
	connKey := teamA + "/github"

	oc := newClient(teamB, "borrower", v1alpha1.ProjectReference{Name: "proj", Namespace: teamA})
	oc.Spec.Connectors = []v1alpha1.ConnectorName{v1alpha1.ConnectorName(connKey)}
	create(t, oc)
	waitReady(t, oc)
	cond := waitCondition(t, oc, v1alpha1.OAuthClientConnectorsResolvedCondition, metav1.ConditionFalse, v1alpha1.OAuthClientConnectorNotAllowedReason)
	if !strings.Contains(cond.Message, connKey) || !strings.Contains(cond.Message, teamB) {
		t.Errorf("message %q names neither the Connector nor the namespace", cond.Message)
	}
	exchanges := func(want bool) func(*config.Snapshot) error {
		return func(s *config.Snapshot) error {
			c := s.Project(teamA + "/proj").Clients[oc.Status.ClientID]
			if c == nil {
				return errors.New("client not compiled")
			}
			if got := slices.Contains(c.Connectors, connKey); got != want {
				return fmt.Errorf("client may exchange for %s: %t, want %t", connKey, got, want)
			}
			return nil
		}
	}
	waitSnapshot(t, "no exchange for the other team's Connector", exchanges(false))

	// A selector on another namespace's name grants nothing to team-b.
	update(t, conn, func(c *v1alpha1.Connector) {
		c.Spec.AllowedClientNamespaces = &v1alpha1.AllowedClientNamespaces{
			From:     v1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "someone-else"}},
		}
	})
	waitReady(t, conn)
	waitCondition(t, oc, v1alpha1.OAuthClientConnectorsResolvedCondition, metav1.ConditionFalse, v1alpha1.OAuthClientConnectorNotAllowedReason)

	// team-a grants team-b by name: now it may.
	update(t, conn, func(c *v1alpha1.Connector) {
		c.Spec.AllowedClientNamespaces.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{teamB}},
		}}
	})
	waitCondition(t, oc, v1alpha1.OAuthClientConnectorsResolvedCondition, metav1.ConditionTrue, v1alpha1.OAuthClientConnectorsResolvedReason)
	waitSnapshot(t, "exchange once granted", exchanges(true))

	// Taking the grant back takes the exchange away.
	update(t, conn, func(c *v1alpha1.Connector) { c.Spec.AllowedClientNamespaces = nil })
	waitCondition(t, oc, v1alpha1.OAuthClientConnectorsResolvedCondition, metav1.ConditionFalse, v1alpha1.OAuthClientConnectorNotAllowedReason)
	waitSnapshot(t, "no exchange once the grant is gone", exchanges(false))

	// A client in the Connector's own namespace needs no grant.
	own := newClient(teamA, "own", v1alpha1.ProjectReference{Name: "proj"})
	own.Spec.Connectors = []v1alpha1.ConnectorName{"github"}
	create(t, own)
	waitCondition(t, own, v1alpha1.OAuthClientConnectorsResolvedCondition, metav1.ConditionTrue, v1alpha1.OAuthClientConnectorsResolvedReason)
}

// TestForeignRedirectPolicyOnlyNarrows: a RedirectPolicy in a namespace the Project admits,
// but not the Project's own, cannot add a recognised destination or turn a built-in back on;
// it can make the Project stricter. Its status says what was ignored.
func TestForeignRedirectPolicyOnlyNarrows(t *testing.T) {
	needEnv(t)
	home := newNamespace(t, nil)
	tenant := newNamespace(t, nil)
	newProject(t, home, "proj", &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll})
	ref := v1alpha1.ProjectReference{Name: "proj", Namespace: home}

	homePolicy := &v1alpha1.RedirectPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "org"},
		Spec: v1alpha1.RedirectPolicySpec{
			ProjectRef: v1alpha1.ProjectReference{Name: "proj"},
			Builtins:   &v1alpha1.Builtins{Loopback: ptr.To(false)},
			Recognised: []v1alpha1.RecognisedRedirect{{Name: "Portal", URI: "https://portal.example.com/callback"}},
		},
	}
	create(t, homePolicy)
	waitReady(t, homePolicy)

	evil := &v1alpha1.RedirectPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "mine"},
		Spec: v1alpha1.RedirectPolicySpec{
			ProjectRef: ref,
			Recognised: []v1alpha1.RecognisedRedirect{{Name: "Acme SSO", URI: "https://evil.example/callback"}},
		},
	}
	create(t, evil)
	waitReady(t, evil)
	rulesAre := func(what string, check func(config.RedirectRules) error) {
		t.Helper()
		waitSnapshot(t, what, func(s *config.Snapshot) error {
			p := s.Project(home + "/proj")
			if p == nil {
				return errors.New("no project")
			}
			return check(p.Redirects)
		})
	}
	// A later change in the home namespace marks a snapshot compiled with the tenant's policy
	// in the cache (one informer delivers RedirectPolicy events in order).
	update(t, homePolicy, func(p *v1alpha1.RedirectPolicy) {
		p.Spec.Recognised = append(p.Spec.Recognised, v1alpha1.RecognisedRedirect{Name: "Wiki", URI: "https://wiki.example.com/callback"})
	})
	rulesAre("the tenant's destination is not recognised, loopback stays off", func(r config.RedirectRules) error {
		var patterns []string
		for _, n := range r.Named {
			patterns = append(patterns, n.Pattern)
		}
		if !slices.Contains(patterns, "https://wiki.example.com/callback") {
			return errors.New("the home policy's change is not compiled yet")
		}
		if r.Loopback || len(r.Named) != 2 || slices.Contains(patterns, "https://evil.example/callback") {
			return fmt.Errorf("rules = %+v", r)
		}
		return nil
	})
	cond := waitCondition(t, evil, v1alpha1.RedirectPolicyIgnoredFieldsCondition, metav1.ConditionTrue, v1alpha1.RedirectPolicyOutsideProjectNamespaceReason)
	for _, want := range []string{"spec.recognised", "spec.builtins.loopback", home} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("message %q does not mention %q", cond.Message, want)
		}
	}
	waitEvent(t, evil, corev1.EventTypeWarning, v1alpha1.RedirectPolicyOutsideProjectNamespaceReason)
	waitCondition(t, homePolicy, v1alpha1.RedirectPolicyIgnoredFieldsCondition, metav1.ConditionFalse, v1alpha1.RedirectPolicyNoneIgnoredReason)

	// The OAuthClient status reads the same rules.
	oc := newClient(tenant, "phish", ref)
	oc.Spec.RedirectURIs = []v1alpha1.RedirectURI{"https://evil.example/callback"}
	create(t, oc)
	waitReady(t, oc)
	eventually(t, "the tenant's destination classified as other", func() error {
		if err := get(oc); err != nil {
			return err
		}
		if len(oc.Status.Redirects) != 1 || oc.Status.Redirects[0].Classification != v1alpha1.RedirectOther {
			return fmt.Errorf("redirects = %+v", oc.Status.Redirects)
		}
		return nil
	})

	// Narrowing from the tenant's namespace counts.
	update(t, evil, func(p *v1alpha1.RedirectPolicy) {
		p.Spec.Recognised = nil
		p.Spec.Builtins = &v1alpha1.Builtins{Claude: ptr.To(false)}
		p.Spec.OnlyRecognisedApps = true
	})
	rulesAre("the tenant's narrowing applies", func(r config.RedirectRules) error {
		if r.Claude || !r.ChatGPT || r.Loopback || !r.OnlyRecognisedApps || len(r.Named) != 2 {
			return fmt.Errorf("rules = %+v", r)
		}
		return nil
	})
	// builtins.loopback is defaulted to true by the API server: still ignored, still said.
	cond = waitCondition(t, evil, v1alpha1.RedirectPolicyIgnoredFieldsCondition, metav1.ConditionTrue, v1alpha1.RedirectPolicyOutsideProjectNamespaceReason)
	if strings.Contains(cond.Message, "spec.recognised") || !strings.Contains(cond.Message, "spec.builtins.loopback") {
		t.Errorf("message %q", cond.Message)
	}
	if c := meta.FindStatusCondition(evil.Status.Conditions, v1alpha1.ReadyCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v, want True: the narrowing part is in force", c)
	}
}

// TestTenantCannotClaimOtherTeamsResource: team-b lists team-a's MCP server URL in its own
// OAuthClient's spec.resources. The URL belongs to team-a's older client, so team-b's client
// reports ResourcesOwned=False naming the owner, and is compiled without the URL: no
// client_credentials token for it, and no audience of tokens issued for it. Only team-a's
// spec.resourceSharing lets team-b serve it; once team-a's client is gone, team-b's owns it.
func TestTenantCannotClaimOtherTeamsResource(t *testing.T) {
	needEnv(t)
	// Creation times have a resolution of a second: on a tie the namespace decides, so team-a's
	// is the one that sorts first.
	names := []string{newNamespace(t, nil), newNamespace(t, nil)}
	slices.Sort(names)
	teamA, teamB := names[0], names[1]
	newProject(t, teamA, "proj", &v1alpha1.AllowedNamespaces{From: v1alpha1.NamespacesFromAll})
	const resource = "https://mcp.team-a.example/mcp"
	machine := func(ns, name string) *v1alpha1.OAuthClient {
		oc := newClient(ns, name, v1alpha1.ProjectReference{Name: "proj", Namespace: teamA})
		oc.Spec.GrantTypes = []v1alpha1.GrantType{v1alpha1.GrantAuthorizationCode, v1alpha1.GrantClientCredentials}
		oc.Spec.Resources = []v1alpha1.ResourceURI{resource}
		return oc
	}
	owner := machine(teamA, "mcp-server")
	create(t, owner)
	waitReady(t, owner)
	waitCondition(t, owner, v1alpha1.OAuthClientResourcesOwnedCondition, metav1.ConditionTrue, v1alpha1.OAuthClientResourcesOwnedReason)

	intruder := machine(teamB, "intruder")
	create(t, intruder)
	waitReady(t, intruder)
	cond := waitCondition(t, intruder, v1alpha1.OAuthClientResourcesOwnedCondition, metav1.ConditionFalse, v1alpha1.OAuthClientResourceConflictReason)
	if !strings.Contains(cond.Message, teamA+"/mcp-server") || !strings.Contains(cond.Message, resource) {
		t.Errorf("message %q names neither the owner nor the resource", cond.Message)
	}
	waitDegraded(t, intruder, v1alpha1.OAuthClientResourceConflictReason)
	serves := func(oc *v1alpha1.OAuthClient, want bool) func(*config.Snapshot) error {
		return func(s *config.Snapshot) error {
			p := s.Project(teamA + "/proj")
			if p == nil {
				return errors.New("project not compiled yet")
			}
			c := p.Clients[oc.Status.ClientID]
			if c == nil {
				return errors.New("client not compiled")
			}
			if got := slices.Contains(c.Resources, resource); got != want {
				return fmt.Errorf("%s/%s serves %s: %t, want %t", oc.Namespace, oc.Name, resource, got, want)
			}
			return nil
		}
	}
	waitSnapshot(t, "team-b's client is compiled without team-a's resource", serves(intruder, false))
	waitSnapshot(t, "team-a's client keeps it", serves(owner, true))

	// Team-a shares it with team-b by name: now team-b's client serves it too.
	update(t, owner, func(oc *v1alpha1.OAuthClient) {
		oc.Spec.ResourceSharing = &v1alpha1.AllowedClientNamespaces{From: v1alpha1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{teamB}},
			}}}
	})
	waitCondition(t, intruder, v1alpha1.OAuthClientResourcesOwnedCondition, metav1.ConditionTrue, v1alpha1.OAuthClientResourcesOwnedReason)
	waitSnapshot(t, "shared", serves(intruder, true))

	// Taking the sharing back takes the resource away.
	update(t, owner, func(oc *v1alpha1.OAuthClient) { oc.Spec.ResourceSharing = nil })
	waitCondition(t, intruder, v1alpha1.OAuthClientResourcesOwnedCondition, metav1.ConditionFalse, v1alpha1.OAuthClientResourceConflictReason)
	waitSnapshot(t, "no longer shared", serves(intruder, false))

	// The owner gone, the next client listing the URL owns it.
	if err := k8s.Delete(t.Context(), owner); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, intruder, v1alpha1.OAuthClientResourcesOwnedCondition, metav1.ConditionTrue, v1alpha1.OAuthClientResourcesOwnedReason)
	waitSnapshot(t, "owned once the owner is gone", serves(intruder, true))
}

// TestTenantConnectorUsesOnlyOptedInSecrets: a team that may write Connectors but not read
// Secrets names the namespace's database password (or a TLS key, the Project's password file,
// another client's credentials) as a Connector's client secret, with a token endpoint of its
// own choosing. Nothing of the Secret is compiled, so nothing can be sent; and the Connector's
// condition reads exactly as it does for a Secret that does not exist, so the team cannot
// even learn which Secrets exist. Once the Secret's owner labels it latchkey.dev/use=connector,
// the Connector uses it.
func TestTenantConnectorUsesOnlyOptedInSecrets(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, nil)
	empty := newNamespace(t, nil) // the same names, but no Secret at all
	for _, n := range []string{ns, empty} {
		newProject(t, n, "proj", nil)
	}
	agent := newClient(ns, "agent", v1alpha1.ProjectReference{Name: "proj"})
	create(t, agent)
	waitReady(t, agent)

	const dbPassword = "the-database-password-0123456789"
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Data:       map[string][]byte{"password": []byte(dbPassword)},
	})
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-tls"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": []byte("certificate"), "tls.key": []byte("the-private-key")},
	})
	stolen := map[string]bool{}
	for _, s := range []string{dbPassword, "the-private-key"} {
		stolen[s] = true
	}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-credentials"}}
	if err := get(creds); err != nil {
		t.Fatal(err)
	}
	stolen[string(creds.Data["client_secret"])] = true

	targets := []struct{ name, secret, key string }{
		{"a database password", "db", "password"},
		{"a TLS key", "web-tls", "tls.key"},
		{"the Project's password file", "proj-passwords", "passwords.yaml"},
		{"another client's credentials", "agent-credentials", "client_secret"},
	}
	thief := func(namespace, name, secret, key string) *v1alpha1.Connector {
		c := newConnector(namespace, name, "proj", secret)
		c.Spec.Preset = ""
		c.Spec.Endpoints = &v1alpha1.ConnectorEndpoints{
			AuthorizationURL: "https://collector.example/authorize",
			TokenURL:         "https://collector.example/token",
			UserInfoURL:      "https://collector.example/user",
		}
		c.Spec.ClientSecretRef.Key = key
		return c
	}
	for i, tc := range targets {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("thief-%d", i)
			conn := thief(ns, name, tc.secret, tc.key)
			create(t, conn)
			missing := thief(empty, name, tc.secret, tc.key)
			create(t, missing)

			got := waitNotReady(t, conn, v1alpha1.ConnectorSecretMissingReason)
			want := waitNotReady(t, missing, v1alpha1.ConnectorSecretMissingReason)
			if msg := strings.ReplaceAll(got.Message, ns, empty); msg != want.Message {
				t.Errorf("the condition tells an existing Secret from a missing one:\n%s\n%s", got.Message, want.Message)
			}
			waitEvent(t, conn, corev1.EventTypeWarning, v1alpha1.ConnectorSecretMissingReason)
		})
	}
	waitSnapshot(t, "no value of those Secrets is compiled", func(s *config.Snapshot) error {
		p := s.Project(ns + "/proj")
		if p == nil {
			return errors.New("project not compiled yet")
		}
		for key, c := range p.Connectors {
			if stolen[c.ClientSecret] {
				return fmt.Errorf("Connector %s compiled with a value of a Secret it may not use", key)
			}
		}
		return nil
	})

	// The owner opts the Secret in: now it is the Connector's client secret.
	opted := thief(ns, "opted-in", "db", "password")
	create(t, opted)
	waitNotReady(t, opted, v1alpha1.ConnectorSecretMissingReason)
	update(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}}, func(s *corev1.Secret) {
		s.Labels = map[string]string{v1alpha1.SecretUseLabel: v1alpha1.SecretUseConnector}
	})
	waitReady(t, opted)
	waitSnapshot(t, "the opted-in Secret is used", func(s *config.Snapshot) error {
		if c := inProject(s, ns+"/proj").Connectors[ns+"/opted-in"]; c == nil || c.ClientSecret != dbPassword {
			return errors.New("not compiled with the opted-in Secret")
		}
		return nil
	})
}

// TestSecretCacheHoldsOnlyOptedIn: the operator's cache holds no Secret without the label
// latchkey.dev/use, and a read of one through the controllers' client finds nothing rather
// than reaching past the cache to the API server. Labelling a Secret brings it in; taking the
// label off takes it out.
func TestSecretCacheHoldsOnlyOptedIn(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	ns := newNamespace(t, nil)
	db := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, StringData: map[string]string{"password": "s3cret"}}
	create(t, db)
	opted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh-app", Labels: forConnector()},
		StringData: map[string]string{"clientSecret": "upstream-secret"}}
	create(t, opted)
	inCache := func(s *corev1.Secret) error {
		return managerCache.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{})
	}
	// Watch events arrive in order: once the later Secret is in, the earlier one would be too.
	eventually(t, "the opted-in Secret is cached", func() error { return inCache(opted) })
	for name, read := range map[string]client.Reader{"cache": managerCache, "controllers' client": managerClient} {
		if err := read.Get(ctx, client.ObjectKeyFromObject(db), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("the %s reads an unlabelled Secret: %v", name, err)
		}
	}
	var all corev1.SecretList
	if err := managerCache.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	for _, s := range all.Items {
		if _, ok := s.Labels[v1alpha1.SecretUseLabel]; !ok {
			t.Errorf("the cache holds Secret %s/%s without %s", s.Namespace, s.Name, v1alpha1.SecretUseLabel)
		}
	}

	update(t, db, func(s *corev1.Secret) { s.Labels = forProject() })
	eventually(t, "a Secret labelled later is cached", func() error { return inCache(db) })
	update(t, db, func(s *corev1.Secret) { s.Labels = nil })
	eventually(t, "a Secret whose label is taken off leaves the cache", func() error {
		if err := inCache(db); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still cached: %w", err)
		}
		return nil
	})
}
