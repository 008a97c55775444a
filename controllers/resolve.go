package controllers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/jwks"
	lkkeys "latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/redirect"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/upstream/catalog"
	"latchkey.dev/latchkey/internal/workload"
)

// notReady says why an object is not Ready. Reconcilers turn it into Ready=False with this
// reason and message. Because reconcilers and the compiler get it from the same resolver, an
// OAuthClient, Connector or RedirectPolicy is missing from the snapshot exactly when its
// reconciler reports it not Ready. A Project is in the snapshot whenever it compiled: it is
// Ready=False also while it serves with a feature off (a broken Secret, docs/decisions/0014).
// Any other error is a failure to read the cache and is retried.
type notReady struct {
	reason  string
	message string
}

func (e *notReady) Error() string { return e.reason + ": " + e.message }

func notReadyf(reason, format string, args ...any) *notReady {
	return &notReady{reason: reason, message: fmt.Sprintf(format, args...)}
}

// asNotReady reports whether err is a notReady.
func asNotReady(err error) (*notReady, bool) {
	var nr *notReady
	ok := errors.As(err, &nr)
	return nr, ok
}

// joinNotReady folds several notReady errors into one: the reason of the first, every message.
// errs is not empty.
func joinNotReady(errs []*notReady) *notReady {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.message
	}
	return &notReady{reason: errs[0].reason, message: strings.Join(msgs, "; ")}
}

// resolver turns Latchkey objects into compiled configuration, reading everything they refer to
// from a Reader (the manager's cache). It memoises within one pass: a reconciler makes one
// per reconcile, the compiler one per compilation. Objects read from the cache are shared, never
// modified.
type resolver struct {
	c         Reader
	publicURL string

	projects   map[types.NamespacedName]*projectResult
	namespaces map[string]*corev1.Namespace
	connBase   map[types.NamespacedName]*connectorResult
	connFull   map[types.NamespacedName]*connectorResult
	// clientsReady memoises which OAuthClients contesting a resource URL are Ready (resources.go).
	clientsReady map[types.NamespacedName]bool
	// secrets records every Secret looked up, present or not, so the compiler knows which Secret
	// events matter.
	secrets map[types.NamespacedName]struct{}
	// configMaps records every ConfigMap looked up (Project logos), likewise.
	configMaps map[types.NamespacedName]struct{}
	// memo, when set (reconcilers), reuses compiled Projects across resolvers.
	memo *projectMemo
	// signing gives Projects with signingKeySource Operator their keys; nil when the operator
	// keeps none (tests, and callers that do not wire it).
	signing *lkkeys.Signing
	// bundles fetches SPIFFE bundle endpoints (Options.SPIFFEBundles); nil where none are
	// fetched (a server without a cluster). staleBundles holds, per OAuthClient, why its
	// endpoint's last refresh failed while its last good bundle serves, and bundleNext when the
	// endpoint is fetched again.
	bundles      *workload.Bundles
	staleBundles map[types.NamespacedName]*notReady
	bundleNext   map[types.NamespacedName]time.Time
}

type projectResult struct {
	obj *v1alpha1.Project // nil: not found
	// compiled is set whenever the Project compiled, also with err set: a Secret problem turns
	// off a feature (err says which), not the Project. nil: not found.
	compiled *config.Project
	err      error
}

type connectorResult struct {
	compiled *config.Connector
	project  string // key of the Project it attaches to
	err      error
}

func newResolver(c Reader, publicURL string) *resolver {
	return &resolver{
		c:          c,
		publicURL:  strings.TrimRight(publicURL, "/"),
		projects:   map[types.NamespacedName]*projectResult{},
		namespaces: map[string]*corev1.Namespace{},
		connBase:   map[types.NamespacedName]*connectorResult{},
		connFull:   map[types.NamespacedName]*connectorResult{},
		secrets:    map[types.NamespacedName]struct{}{},
		configMaps: map[types.NamespacedName]struct{}{},

		staleBundles: map[types.NamespacedName]*notReady{},
		bundleNext:   map[types.NamespacedName]time.Time{},
	}
}

// issuer is the Project's issuer URL; the HTTP server routes on exactly this shape.
func (r *resolver) issuer(namespace, name string) string {
	return r.publicURL + "/" + namespace + "/" + name
}

// callbackURL is a Connector's own fixed upstream callback under its Project's issuer. One per
// Connector, so a code one service issued is never redeemed at another Connector's token
// endpoint (RFC 9700 §4.4, docs/decisions/0021).
func (r *resolver) callbackURL(projectKey, connector types.NamespacedName) string {
	return r.issuer(projectKey.Namespace, projectKey.Name) + config.CallbackPath(connector.Namespace, connector.Name)
}

// allowedNetworks compiles a Project's spec.upstreamNetwork.allowedCIDRs: the ranges of the
// Project's own calls and of the Connectors in its own namespace (network.go).
func allowedNetworks(p *v1alpha1.Project) []netip.Prefix {
	if p.Spec.UpstreamNetwork == nil {
		return nil
	}
	return parseCIDRs(p.Spec.UpstreamNetwork.AllowedCIDRs)
}

// ---------------------------------------------------------------------------------------------
// Secrets

// secret returns a Secret a Project may use, or notReady(SecretMissing) naming it and the
// field that refers to it. A Project is written by an administrator, so any Secret that opted
// in to Latchkey (SecretUseLabel, with any value) will do.
func (r *resolver) secret(ctx context.Context, namespace, name, field string) (*corev1.Secret, error) {
	return r.secretFor(ctx, namespace, name, field, "")
}

// secretFor returns a Secret that opted in for use (any use when use is empty), or
// notReady(SecretMissing). A Secret without the opt-in reads exactly as a missing one, reason
// and message, so the condition tells whoever wrote the referring object nothing about a
// Secret they may not read (docs/decisions/0051).
func (r *resolver) secretFor(ctx context.Context, namespace, name, field, use string) (*corev1.Secret, error) {
	sec, err := r.optionalSecret(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	if sec == nil || (use != "" && sec.Labels[v1alpha1.SecretUseLabel] != use) {
		label := v1alpha1.SecretUseLabel
		if use != "" {
			label += "=" + use
		}
		return nil, notReadyf(v1alpha1.SecretMissingReason, "Secret %s/%s (%s) not found, or not labelled %s", namespace, name, field, label)
	}
	return sec, nil
}

// optionalSecret returns a Secret that opted in to Latchkey, or nil when there is none. A
// Secret without SecretUseLabel is not one Latchkey may read: the manager's cache does not
// hold it (CacheOptions), and the same rule here makes every other reader (the no-cluster
// mode's files) see what a cluster would.
func (r *resolver) optionalSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	r.secrets[key] = struct{}{}
	sec := &corev1.Secret{}
	if err := r.c.Get(ctx, key, sec, noCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if _, ok := sec.Labels[v1alpha1.SecretUseLabel]; !ok {
		return nil, nil
	}
	return sec, nil
}

// secretValue returns one non-empty value of a Secret that opted in for use (any, when empty).
func (r *resolver) secretValue(ctx context.Context, namespace string, ref v1alpha1.SecretKeyReference, field, use string) ([]byte, error) {
	sec, err := r.secretFor(ctx, namespace, ref.Name, field, use)
	if err != nil {
		return nil, err
	}
	v, ok := sec.Data[ref.Key]
	if !ok {
		return nil, notReadyf(v1alpha1.SecretInvalidReason, "Secret %s/%s (%s) has no key %q", namespace, ref.Name, field, ref.Key)
	}
	if len(v) == 0 {
		return nil, notReadyf(v1alpha1.SecretInvalidReason, "Secret %s/%s (%s) key %q is empty", namespace, ref.Name, field, ref.Key)
	}
	return v, nil
}

// ---------------------------------------------------------------------------------------------
// Projects

// project resolves a Project by key: the object (nil if it does not exist), its compiled form
// without attachments, and why it is not Ready.
func (r *resolver) project(ctx context.Context, key types.NamespacedName) (*projectResult, error) {
	if pr, ok := r.projects[key]; ok {
		return pr, nil
	}
	p := &v1alpha1.Project{}
	if err := r.c.Get(ctx, key, p, noCopy); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading Project %s: %w", key, err)
		}
		pr := &projectResult{err: notReadyf(v1alpha1.ProjectNotFoundReason, "Project %s not found", key)}
		r.projects[key] = pr
		return pr, nil
	}
	return r.projectFromObject(ctx, p)
}

// projectFromObject compiles a Project already read (the reconciler's own object, or a cache
// list item in the compiler).
func (r *resolver) projectFromObject(ctx context.Context, p *v1alpha1.Project) (*projectResult, error) {
	key := objectKey(p)
	if pr, ok := r.projects[key]; ok {
		return pr, nil
	}
	var versions map[string]string
	if r.memo != nil {
		var memo *projectResult
		if memo, versions = r.memo.lookup(ctx, r.c, p); memo != nil {
			pr := &projectResult{obj: p, compiled: memo.compiled, err: memo.err}
			r.projects[key] = pr
			return pr, nil
		}
	}
	compiled, err := r.compileProject(ctx, p)
	if err != nil {
		if _, ok := asNotReady(err); !ok {
			return nil, err
		}
	}
	pr := &projectResult{obj: p, compiled: compiled, err: err}
	r.projects[key] = pr
	if r.memo != nil {
		r.memo.store(p, versions, pr)
	}
	return pr, nil
}

// compileProject compiles a Project. A Secret problem turns off only the feature that needs the
// Secret: the Project is still returned, with a notReady that lists every problem and ends with
// what is off, so the issuer keeps serving tokens while the administrator fixes it. What is
// off follows from the cluster state alone, so every replica compiles the same thing. A nil
// Project comes only with a cache read error.
func (r *resolver) compileProject(ctx context.Context, p *v1alpha1.Project) (*config.Project, error) {
	out := r.projectConfig(p)
	out.SignIn.RequirePhishingResistant = p.Spec.SignIn.RequirePhishingResistant
	var off degraded
	for _, step := range []projectStep{
		r.compilePasswords,
		r.compileOIDC,
		r.compileRegistration,
		r.compileEventSinks,
		r.compileSigningKeys,
		r.compileIdentityAssertions,
		r.compileBranding,
		r.compileAuthorizationDetails,
	} {
		if err := step(ctx, p, out, &off); err != nil {
			return nil, err
		}
	}
	return out, off.err()
}

// projectStep compiles one part of a Project that may need a Secret into out. A Secret problem
// goes to off and turns off only that part; any other error is a cache read failure.
type projectStep func(ctx context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error

// projectConfig is the part of a Project that needs no Secret.
func (r *resolver) projectConfig(p *v1alpha1.Project) *config.Project {
	return &config.Project{
		Key:                  p.Namespace + "/" + p.Name,
		Namespace:            p.Namespace,
		Name:                 p.Name,
		DisplayName:          cmp.Or(p.Spec.DisplayName, p.Name),
		DefaultLanguage:      p.Spec.DefaultLanguage,
		Issuer:               r.issuer(p.Namespace, p.Name),
		Lifetimes:            lifetimes(p.Spec.Lifetimes),
		Registration:         config.Registration{Mode: config.RegistrationClosed},
		Clients:              map[string]*config.Client{},
		Connectors:           map[string]*config.Connector{},
		ConnectorsByAudience: map[string]*config.Connector{},
		Redirects:            config.DefaultRedirectRules(),
		RequireDPoP:          p.Spec.RequireDPoP,
		RequireDPoPNonce:     p.Spec.RequireDPoPNonce,
		RequirePAR:           p.Spec.RequirePushedAuthorizationRequests,
	}
}

// degraded collects a Project's Secret problems and the feature each turns off. Compilation
// goes on after a problem so the condition lists all of them at once.
type degraded struct {
	problems []*notReady
	off      []string
	// looks are parts of the Project's branding left out; the pages show the default instead.
	looks []string
}

// add records err, when it is a notReady, as a problem that turns feature off, and reports
// whether there was one. Any other error is returned.
func (d *degraded) add(err error, feature string) (bool, error) {
	if err == nil {
		return false, nil
	}
	nr, ok := asNotReady(err)
	if !ok {
		return false, err
	}
	d.problems = append(d.problems, nr)
	d.off = append(d.off, feature)
	return true, nil
}

// err is nil without problems; otherwise a notReady with the first problem's reason and every
// message, ending with what is off.
func (d *degraded) err() error {
	if len(d.problems) == 0 {
		return nil
	}
	nr := joinNotReady(d.problems)
	var suffix string
	if len(d.off) > 0 {
		suffix = "; serving without " + strings.Join(d.off, ", ") + " until the Secret is fixed (it is read again on every change)"
	}
	if len(d.looks) > 0 {
		suffix += "; the pages show " + strings.Join(d.looks, " and ") + " until it is fixed"
	}
	// The condition keeps maxMessage bytes; what is off must survive, so the problems give way.
	if room := maxMessage - len(suffix); len(nr.message) > room {
		nr.message = nr.message[:max(room-3, 0)] + "..."
	}
	nr.message += suffix
	return nr
}

// compilePasswords reads the password file; without a usable one, password sign-in is off.
func (r *resolver) compilePasswords(ctx context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error {
	ref := p.Spec.SignIn.PasswordSecretRef
	if ref == nil {
		return nil
	}
	data, err := r.secretValue(ctx, p.Namespace, *ref, "spec.signIn.passwordSecretRef", "")
	var passwords map[string]config.PasswordUser
	if err == nil {
		passwords, err = parsePasswordFile(data)
		if err != nil {
			err = notReadyf(v1alpha1.SecretInvalidReason, "Secret %s/%s key %q (spec.signIn.passwordSecretRef): %v", p.Namespace, ref.Name, ref.Key, err)
		}
	}
	// Its people are signed out meanwhile (webhook/site PersonActive fails closed, decision 0050).
	bad, err := off.add(err, "password sign-in (its people are signed out)")
	if err != nil {
		return err
	}
	out.SignIn.Passwords = passwords
	out.SignIn.PasswordsUnavailable = bad
	return nil
}

// compileOIDC compiles the OIDC sign-in provider; without its client secret it is unavailable.
func (r *resolver) compileOIDC(ctx context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error {
	o := p.Spec.SignIn.OIDC
	if o == nil {
		return nil
	}
	sec, err := r.secretValue(ctx, p.Namespace, o.ClientSecretRef, "spec.signIn.oidc.clientSecretRef", "")
	bad, err := off.add(err, "OIDC sign-in")
	if err != nil {
		return err
	}
	scopes := scopeStrings(o.Scopes)
	if len(scopes) == 0 {
		scopes = []string{"openid", "email", "profile"}
	}
	// Compiled even when unavailable: the issuer says who the provider's people are.
	out.SignIn.OIDC = &config.OIDCProvider{
		Issuer:       string(o.Issuer),
		ClientID:     o.ClientID,
		ClientSecret: string(sec),
		Scopes:       scopes,
		Label:        cmp.Or(o.Label, "Sign in with SSO"),
		Unavailable:  bad,
	}
	if o.RecheckInterval != nil {
		out.SignIn.OIDC.RecheckInterval = o.RecheckInterval.Duration
	}
	for _, d := range o.AllowedEmailDomains {
		out.SignIn.OIDC.AllowedEmailDomains = append(out.SignIn.OIDC.AllowedEmailDomains, strings.ToLower(string(d)))
	}
	for _, g := range o.AllowedGroups {
		out.SignIn.OIDC.AllowedGroups = append(out.SignIn.OIDC.AllowedGroups, string(g))
	}
	if len(o.AllowedGroups) > 0 {
		out.SignIn.OIDC.GroupsClaim = cmp.Or(o.GroupsClaim, "groups")
	}
	return nil
}

// compileRegistration compiles dynamic client registration; in initialAccessToken mode it needs
// the tokens' Secret, without which registration is refused.
func (r *resolver) compileRegistration(ctx context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error {
	reg := p.Spec.Registration
	if reg == nil {
		return nil
	}
	out.Registration.Mode = config.RegistrationMode(cmp.Or(reg.Mode, v1alpha1.RegistrationClosed))
	out.Registration.ClientIDMetadataDocuments = reg.ClientIDMetadataDocuments
	for _, sc := range reg.Scopes {
		out.Registration.Scopes = append(out.Registration.Scopes, string(sc))
	}
	if cc := reg.ClientCredentials; cc != nil {
		for _, u := range cc.Resources {
			out.Registration.ClientCredentialsResources = append(out.Registration.ClientCredentialsResources, string(u))
		}
		for _, sc := range cc.Scopes {
			out.Registration.ClientCredentialsScopes = append(out.Registration.ClientCredentialsScopes, string(sc))
		}
	}
	if out.Registration.Mode != config.RegistrationInitialAccessToken || reg.InitialAccessTokenSecretRef == nil {
		return nil
	}
	// Without hashes no token matches: registration fails closed.
	hashes, err := r.initialAccessTokens(ctx, p.Namespace, reg.InitialAccessTokenSecretRef.Name)
	if _, err := off.add(err, "client registration"); err != nil {
		return err
	}
	out.Registration.InitialAccessTokenHashes = hashes
	return nil
}

// compileEventSinks compiles the event sinks; one without a usable HMAC key is unavailable.
func (r *resolver) compileEventSinks(ctx context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error {
	for i, sink := range p.Spec.EventSinks {
		field := fmt.Sprintf("spec.eventSinks[%d].hmacSecretRef", i)
		value, err := r.secretValue(ctx, p.Namespace, sink.HMACSecretRef, field, "")
		var keys [][]byte
		if err == nil {
			// Standard Webhooks secrets (whsec_…, two while rotating) or a raw key.
			var perr error
			if keys, perr = events.ParseSinkSecret(value); perr != nil {
				err = notReadyf(v1alpha1.SecretInvalidReason, "Secret %s/%s key %q (%s) %s", p.Namespace, sink.HMACSecretRef.Name, sink.HMACSecretRef.Key, field, perr.Error())
			}
		}
		bad, err := off.add(err, fmt.Sprintf("event sink %q", sink.Name))
		if err != nil {
			return err
		}
		var key []byte
		if bad {
			keys = nil
		} else {
			key = keys[0]
		}
		// An unavailable sink stays listed, so its events are still queued and wait for it.
		var types []string
		for _, t := range sink.Types {
			types = append(types, string(t))
		}
		out.EventSinks = append(out.EventSinks, config.EventSink{Name: sink.Name, URL: string(sink.URL), HMACKey: key, Keys: keys, Types: types, Unavailable: bad})
	}
	return nil
}

// compileSigningKeys reads the JWT signing keys. Without them JWT clients are refused
// (SigningKeyRequired) and opaque ones keep working.
func (r *resolver) compileSigningKeys(ctx context.Context, p *v1alpha1.Project, out *config.Project, off *degraded) error {
	if p.Spec.SigningKeySource == v1alpha1.SigningKeysFromOperator {
		_, err := off.add(r.operatorSigningKeys(p, out), "JWT signing keys")
		return err
	}
	ref := p.Spec.SigningKeySecretRef
	if ref == nil {
		return nil
	}
	sec, err := r.secret(ctx, p.Namespace, ref.Name, "spec.signingKeySecretRef")
	var keys []config.SigningKey
	if err == nil {
		keys, err = parseSigningKeys(sec.Data)
		if err != nil {
			err = notReadyf(v1alpha1.SecretInvalidReason, "Secret %s/%s (spec.signingKeySecretRef): %v", p.Namespace, ref.Name, err)
		}
	}
	if _, err := off.add(err, "JWT signing keys"); err != nil {
		return err
	}
	out.SigningKeys = keys
	return nil
}

// operatorSigningKeys gives the Project its own keys derived from the operator's signing keys.
// Until the operator has loaded its keys Secret the Project cannot compile: the error is
// retried (the compiler does not publish before the keys are loaded anyway).
func (r *resolver) operatorSigningKeys(p *v1alpha1.Project, out *config.Project) error {
	if r.signing == nil {
		return notReadyf(v1alpha1.ProjectSigningKeysUnavailableReason,
			"signingKeySource is Operator but this server was started without a keys Secret (--keys-secret; the chart always sets it)")
	}
	// ID tokens live as long as access tokens (issue.go), so the access token lifetime is the
	// longest a signed token lives.
	ks, ok, err := r.signing.ProjectKeys(p.Namespace+"/"+p.Name, out.Lifetimes.AccessToken)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the operator's keys Secret is not loaded yet")
	}
	out.SigningKeys = ks
	return nil
}

func (r *resolver) initialAccessTokens(ctx context.Context, namespace, name string) ([][]byte, error) {
	const field = "spec.registration.initialAccessTokenSecretRef"
	sec, err := r.secret(ctx, namespace, name, field)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(sec.Data))
	for k, v := range sec.Data {
		if len(v) > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, notReadyf(v1alpha1.SecretInvalidReason, "Secret %s/%s (%s) holds no token", namespace, name, field)
	}
	slices.Sort(keys)
	hashes := make([][]byte, len(keys))
	for i, k := range keys {
		hashes[i] = secret.Hash(strings.TrimSpace(string(sec.Data[k])))
	}
	return hashes, nil
}

// lifetimes fills every unset lifetime with its default. The API server applies the same
// defaults when spec.lifetimes is present; this also covers an absent spec.lifetimes.
func lifetimes(l *v1alpha1.Lifetimes) config.Lifetimes {
	out := config.DefaultLifetimes()
	if l == nil {
		return out
	}
	set := func(dst *time.Duration, src *metav1.Duration) {
		if src != nil {
			*dst = src.Duration
		}
	}
	set(&out.Session, l.Session)
	set(&out.RecentSignIn, l.RecentSignIn)
	set(&out.AuthCode, l.AuthCode)
	set(&out.AccessToken, l.AccessToken)
	set(&out.RefreshToken, l.RefreshToken)
	set(&out.RefreshGrace, l.RefreshGrace)
	set(&out.Link, l.Link)
	set(&out.CallbackState, l.CallbackState)
	return out
}

// ---------------------------------------------------------------------------------------------
// Attachment to a Project

// projectKeyOf is the Project an attached object refers to.
func projectKeyOf(ref v1alpha1.ProjectReference, ownNamespace string) types.NamespacedName {
	return types.NamespacedName{Namespace: cmp.Or(ref.Namespace, ownNamespace), Name: ref.Name}
}

// attach resolves the Project an OAuthClient, Connector or RedirectPolicy refers to. It returns
// the Project object whenever it exists (so status can show the issuer even when not Ready), and
// the compiled Project when the object may attach to it. A Project serving with a feature off
// (Ready=True, Degraded=True for a Secret problem) still takes attachments: only a Project that did not
// compile turns them ProjectNotReady.
func (r *resolver) attach(ctx context.Context, ref v1alpha1.ProjectReference, namespace string) (*v1alpha1.Project, *config.Project, error) {
	key := projectKeyOf(ref, namespace)
	pr, err := r.project(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if pr.obj == nil {
		return nil, nil, pr.err
	}
	ok, why, err := r.admits(ctx, pr.obj, namespace)
	if err != nil {
		return pr.obj, nil, err
	}
	if !ok {
		return pr.obj, nil, notReadyf(v1alpha1.NotAllowedReason, "Project %s does not admit namespace %q: %s", key, namespace, why)
	}
	if pr.compiled == nil {
		nr, _ := asNotReady(pr.err)
		return pr.obj, nil, notReadyf(v1alpha1.ProjectNotReadyReason, "Project %s is not ready: %s", key, nr.message)
	}
	return pr.obj, pr.compiled, nil
}

// admits applies the Project's spec.allowedNamespaces. The Project's own namespace is always
// admitted: whoever can create objects there can edit the Project itself.
func (r *resolver) admits(ctx context.Context, p *v1alpha1.Project, namespace string) (bool, string, error) {
	if namespace == p.Namespace {
		return true, "", nil
	}
	var from v1alpha1.FromNamespaces
	var selector *metav1.LabelSelector
	if an := p.Spec.AllowedNamespaces; an != nil {
		from, selector = an.From, an.Selector
	}
	return r.grants(ctx, "spec.allowedNamespaces", from, selector, namespace)
}

func (r *resolver) namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if ns, ok := r.namespaces[name]; ok {
		return ns, nil
	}
	ns := &corev1.Namespace{}
	if err := r.c.Get(ctx, types.NamespacedName{Name: name}, ns, noCopy); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading Namespace %s: %w", name, err)
		}
		ns = nil
	}
	r.namespaces[name] = ns
	return ns, nil
}

// ---------------------------------------------------------------------------------------------
// Connectors

// connectorAudience is the effective token-exchange audience of a Connector.
func connectorAudience(c *v1alpha1.Connector) string {
	if c.Spec.Audience != "" {
		return c.Spec.Audience
	}
	if c.Spec.Preset != "" {
		return string(c.Spec.Preset)
	}
	return c.Name
}

// connector resolves a Connector completely: attachment, client secret, and the audience rule
// (the oldest otherwise valid Connector of a Project keeps a contested audience).
func (r *resolver) connector(ctx context.Context, c *v1alpha1.Connector) (*connectorResult, error) {
	key := objectKey(c)
	if res, ok := r.connFull[key]; ok {
		return res, nil
	}
	base, err := r.connectorBase(ctx, c)
	if err != nil {
		return nil, err
	}
	res := base
	if base.err == nil {
		winner, err := r.audienceOwner(ctx, c, base.project)
		if err != nil {
			return nil, err
		}
		if winner != nil {
			res = &connectorResult{project: base.project, err: notReadyf(v1alpha1.ConnectorAudienceConflictReason,
				"audience %q is already used by Connector %s/%s of Project %s; set spec.audience to tell them apart",
				connectorAudience(c), winner.Namespace, winner.Name, base.project)}
		}
	}
	r.connFull[key] = res
	return res, nil
}

// connectorByKey resolves a Connector named by key; a missing one is notReady.
func (r *resolver) connectorByKey(ctx context.Context, key types.NamespacedName) (*connectorResult, error) {
	if res, ok := r.connFull[key]; ok {
		return res, nil
	}
	c := &v1alpha1.Connector{}
	if err := r.c.Get(ctx, key, c, noCopy); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading Connector %s: %w", key, err)
		}
		res := &connectorResult{err: notReadyf(v1alpha1.OAuthClientConnectorNotFoundReason, "Connector %s not found", key)}
		r.connFull[key] = res
		return res, nil
	}
	return r.connector(ctx, c)
}

// audienceOwner returns an older Connector of the same Project with the same audience that is
// otherwise valid, or nil.
func (r *resolver) audienceOwner(ctx context.Context, c *v1alpha1.Connector, projectKey string) (*v1alpha1.Connector, error) {
	var list v1alpha1.ConnectorList
	if err := r.c.List(ctx, &list, MatchingFields{projectIndex: projectKey}, noCopy); err != nil {
		return nil, fmt.Errorf("listing Connectors of Project %s: %w", projectKey, err)
	}
	audience := connectorAudience(c)
	var winner *v1alpha1.Connector
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID == c.UID || connectorAudience(other) != audience || !older(other, c) {
			continue
		}
		base, err := r.connectorBase(ctx, other)
		if err != nil {
			return nil, err
		}
		if base.err == nil && base.project == projectKey && (winner == nil || older(other, winner)) {
			winner = other
		}
	}
	return winner, nil
}

// older orders objects by creation time, then by namespace/name, so every replica and every
// reconcile agrees on who came first.
func older(a, b Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetNamespace()+"/"+a.GetName() < b.GetNamespace()+"/"+b.GetName()
}

// connectorBase resolves a Connector without the audience rule.
func (r *resolver) connectorBase(ctx context.Context, c *v1alpha1.Connector) (*connectorResult, error) {
	key := objectKey(c)
	if res, ok := r.connBase[key]; ok {
		return res, nil
	}
	res, err := r.compileConnector(ctx, c)
	if err != nil {
		if _, ok := asNotReady(err); !ok {
			return nil, err
		}
		res = &connectorResult{project: projectKeyOf(c.Spec.ProjectRef, c.Namespace).String(), err: err}
	}
	r.connBase[key] = res
	return res, nil
}

func (r *resolver) compileConnector(ctx context.Context, c *v1alpha1.Connector) (*connectorResult, error) {
	pk := projectKeyOf(c.Spec.ProjectRef, c.Namespace)
	project, _, err := r.attach(ctx, c.Spec.ProjectRef, c.Namespace)
	if err != nil {
		return nil, err
	}
	if c.Spec.APIKey != nil {
		return r.compileAPIKeyConnector(ctx, project, pk, c)
	}
	// The Connector's author chooses where its client secret is sent, so it may name only a
	// Secret its owner opted in for Connectors.
	sec, err := r.secretValue(ctx, c.Namespace, c.Spec.ClientSecretRef, "spec.clientSecretRef", v1alpha1.SecretUseConnector)
	if err != nil {
		return nil, err
	}
	out := &config.Connector{
		Key:         c.Namespace + "/" + c.Name,
		Namespace:   c.Namespace,
		Name:        c.Name,
		DisplayName: c.Spec.DisplayName,
		Preset:      string(c.Spec.Preset),
		Audience:    connectorAudience(c),
		CallbackURL: r.callbackURL(pk, objectKey(c)),
		ClientID:    c.Spec.ClientID,
		// Plaintext on purpose: the server presents it to the upstream token endpoint.
		ClientSecret: strings.TrimSpace(string(sec)),
		Scopes:       scopeStrings(c.Spec.Scopes),
		PKCE:         c.Spec.PKCE == nil || *c.Spec.PKCE,
	}
	if out.AllowedNetworks, err = r.connectorNetworks(ctx, project, c); err != nil {
		return nil, err
	}
	if err := applyDialect(out, c); err != nil {
		return nil, err
	}
	if c.Spec.Sharing == v1alpha1.SharingOrganisation {
		out.Shared = true
		out.SharedClients, _ = sharedClients(project, c)
	}
	if out.TokenAuth == config.TokenAuthPrivateKeyJWT {
		// The Secret's value is the private key: it signs assertions and is never sent.
		out.ClientSecret = ""
		var cert []byte
		if ca := c.Spec.ClientAssertion; ca != nil && ca.CertificateKey != "" {
			ref := v1alpha1.SecretKeyReference{Name: c.Spec.ClientSecretRef.Name, Key: ca.CertificateKey}
			if cert, err = r.secretValue(ctx, c.Namespace, ref, "spec.clientAssertion.certificateKey", v1alpha1.SecretUseConnector); err != nil {
				return nil, err
			}
		}
		if out.Assertion, err = clientAssertionKey(sec, cert, c.Spec.ClientAssertion); err != nil {
			return nil, err
		}
	}
	return &connectorResult{compiled: out, project: pk.String()}, nil
}

// applyDialect fills out's endpoints, dialect and account fields from the catalog preset the
// Connector names (internal/upstream/catalog), then from its spec, which wins field by field.
// An unknown preset, or one whose endpoints need a tenant the spec does not give, is notReady.
//
//nolint:funlen // one line per dialect field the preset or the spec sets, in the order the CRD documents them; split, the precedence rule (spec wins field by field) would be read in pieces
func applyDialect(out *config.Connector, c *v1alpha1.Connector) error {
	sp := &c.Spec
	p := &catalog.Preset{}
	if sp.Preset != "" {
		found, ok := catalog.Get(string(sp.Preset))
		if !ok {
			return notReadyf(v1alpha1.ConnectorUnknownPresetReason,
				"spec.preset %q is not in the catalog; known presets: %s", sp.Preset, strings.Join(catalog.Names(), ", "))
		}
		p = found
		if p.NeedsTenant() && sp.Tenant == "" {
			return notReadyf(v1alpha1.ConnectorPresetParameterMissingReason,
				"the %s preset's endpoints need spec.tenant (the directory id or domain)", sp.Preset)
		}
	}
	base, err := presetBaseURL(p, sp)
	if err != nil {
		return err
	}
	placeholders := strings.NewReplacer(catalog.Tenant, sp.Tenant, catalog.BaseURL, base)
	fill := func(spec v1alpha1.EndpointURL, preset string) string {
		if spec != "" {
			return string(spec)
		}
		return placeholders.Replace(preset)
	}
	e := sp.Endpoints
	if e == nil {
		e = &v1alpha1.ConnectorEndpoints{}
	}
	out.DisplayName = cmp.Or(out.DisplayName, p.DisplayName)
	out.AuthURL = fill(e.AuthorizationURL, p.AuthorizationURL)
	out.TokenURL = fill(e.TokenURL, p.TokenURL)
	out.UserInfoURL = fill(e.UserInfoURL, p.UserInfoURL)
	out.RevocationURL = fill(e.RevocationURL, p.RevocationURL)
	out.OIDCIssuer = fill(e.OIDCIssuer, p.OIDCIssuer)
	out.RefreshURL = fill(e.RefreshURL, p.RefreshURL)
	out.TenantClaim = cmp.Or(sp.TenantClaim, p.TenantClaim)
	out.AllowedTenants = slices.Clone(sp.AllowedTenants)
	if len(out.AllowedTenants) > 0 && (out.OIDCIssuer == "" || out.TenantClaim == "") {
		return notReadyf(v1alpha1.ConnectorInvalidTenantsReason,
			"spec.allowedTenants needs an OIDC issuer and a tenantClaim (from the spec or the preset) to check ID tokens against")
	}

	out.TokenAuth = cmp.Or(string(sp.TokenEndpointAuthMethod), p.TokenEndpointAuthMethod, config.TokenAuthPost)
	out.TokenRequestJSON = cmp.Or(sp.TokenRequestFormat, p.TokenRequestFormat) == "json"
	out.AccessTokenField = cmp.Or(sp.AccessTokenField, p.AccessTokenField)
	if cmp.Or(string(sp.ScopeSeparator), p.ScopeSeparator) == string(v1alpha1.ScopeSeparatorComma) {
		out.ScopeSeparator = ","
	}
	out.ScopeParam = cmp.Or(sp.ScopeParameter, p.ScopeParameter)
	if len(out.Scopes) == 0 && len(p.DefaultScopes) > 0 {
		out.Scopes = slices.Clone(p.DefaultScopes)
	}
	out.RevocationStyle = cmp.Or(string(sp.RevocationStyle), p.RevocationStyle, config.RevokeRFC7009)

	ui := p.UserInfo
	if u := sp.UserInfo; u != nil {
		// The spec's userInfo replaces the preset's as a whole: a body of one and the method of
		// the other would be a request neither describes.
		ui = catalog.UserInfo{Method: string(u.Method), Body: u.Body, GraphQLQuery: u.GraphQLQuery}
	}
	out.UserInfoMethod = cmp.Or(ui.Method, "GET")
	switch {
	case ui.GraphQLQuery != "":
		b, _ := json.Marshal(map[string]string{"query": ui.GraphQLQuery})
		out.UserInfoBody, out.UserInfoMethod = string(b), "POST"
	case ui.Body != "":
		if !json.Valid([]byte(ui.Body)) {
			return notReadyf(v1alpha1.ConnectorInvalidUserInfoReason, "spec.userInfo.body is not a JSON document")
		}
		out.UserInfoBody, out.UserInfoMethod = ui.Body, "POST"
	}

	if len(p.Headers)+len(sp.Headers) > 0 {
		out.Headers = make(map[string]string, len(p.Headers)+len(sp.Headers))
		for k, v := range p.Headers {
			out.Headers[http.CanonicalHeaderKey(k)] = v
		}
		for k, v := range sp.Headers {
			out.Headers[http.CanonicalHeaderKey(k)] = string(v)
		}
	}

	idField, nameField := cmp.Or(p.Account.IDField, "id"), cmp.Or(p.Account.NameField, "email")
	if out.OIDCIssuer != "" && (p.OIDCIssuer == "" || p.Account.IDField == "") {
		// An ID token names the account by sub unless the preset, itself OIDC, names a claim
		// (Microsoft's oid, which Graph calls id).
		idField = "sub"
	}
	if a := sp.Account; a != nil {
		idField = cmp.Or(a.IDField, idField)
		nameField = cmp.Or(a.NameField, nameField)
	}
	out.AccountIDField, out.AccountNameField = idField, nameField

	scopeParam := cmp.Or(out.ScopeParam, "scope")
	params := map[string]string{}
	for k, v := range p.AuthParams {
		params[k] = v
	}
	for k, v := range sp.AuthParams {
		params[k] = string(v)
	}
	delete(params, scopeParam)
	if len(params) > 0 {
		out.AuthParams = params
	}
	if len(p.SelectAccount.Params) > 0 {
		out.SelectAccountParams = maps.Clone(p.SelectAccount.Params)
	}
	out.AccountHintParam = p.SelectAccount.HintParameter
	out.Proxy, err = proxyConfig(sp, p, placeholders)
	return err
}

// presetBaseURL is what {baseURL} stands for in the preset's endpoints: spec.baseURL, checked
// (catalog.CleanBaseURL), or the preset's default. A base URL the endpoints have no place for
// is refused rather than ignored, so a Connector meant for a server of its own never talks to
// the public service instead (docs/decisions/0062).
func presetBaseURL(p *catalog.Preset, sp *v1alpha1.ConnectorSpec) (string, error) {
	if !p.TakesBaseURL() {
		if sp.BaseURL != "" {
			return "", notReadyf(v1alpha1.ConnectorPresetParameterInvalidReason,
				"spec.baseURL is set, but %s has no endpoint that starts with a server's address; presets that take one: %s",
				cmp.Or(string(sp.Preset), "a Connector without a preset"), strings.Join(catalog.NamesTakingBaseURL(), ", "))
		}
		return "", nil
	}
	if sp.BaseURL == "" {
		if p.BaseURL == "" {
			return "", notReadyf(v1alpha1.ConnectorPresetParameterMissingReason,
				"the %s preset's endpoints need spec.baseURL (the server's https address)", sp.Preset)
		}
		return p.BaseURL, nil
	}
	clean, err := catalog.CleanBaseURL(sp.BaseURL)
	if err != nil {
		return "", notReadyf(v1alpha1.ConnectorPresetParameterInvalidReason, "spec.baseURL: %v", err)
	}
	return clean, nil
}

// ---------------------------------------------------------------------------------------------
// OAuthClients

// clientSecretMinLength refuses secrets an administrator shortened by hand; generated ones
// carry 256 bits.
const clientSecretMinLength = 32

// clientIDFor is the id the client is served under: spec.clientID when declared, so the same
// resources give the same id on any cluster (docs/cluster-move.md); otherwise derived from the
// resource's uid: stable for the resource's life, unique across the cluster, and never given by
// Latchkey to a later resource of the same name (whose old tokens must not carry over). Both
// start with config.DeclaredClientPrefix, so a token of either is refused without a database
// read once its OAuthClient is gone (config.Project.ClientGone).
func clientIDFor(oc *v1alpha1.OAuthClient) string {
	if oc.Spec.ClientID != "" {
		return string(oc.Spec.ClientID)
	}
	return config.DeclaredClientPrefix + strings.ReplaceAll(string(oc.UID), "-", "")
}

// defaultSecretSuffix names an OAuthClient's credentials Secret when spec.secretName is unset.
const defaultSecretSuffix = "-credentials"

// credentialsSecretName is the Secret an OAuthClient's credentials go to, or, with
// spec.clientSecretRef, the Secret its client secret comes from.
func credentialsSecretName(oc *v1alpha1.OAuthClient) string {
	if isWorkload(oc) {
		return ""
	}
	if ref := oc.Spec.ClientSecretRef; ref != nil {
		return ref.Name
	}
	return cmp.Or(oc.Spec.SecretName, oc.Name+defaultSecretSuffix)
}

// writesCredentials reports whether Latchkey writes a credentials Secret for the client: not
// when its secret comes from a Secret of the administrator's (spec.clientSecretRef).
// nor for a workload-identity client, which has no secret (its agent learns its id from
// spec.clientID or status.clientID).
func writesCredentials(oc *v1alpha1.OAuthClient) bool {
	return oc.Spec.ClientSecretRef == nil && !isWorkload(oc)
}

func isPublic(oc *v1alpha1.OAuthClient) bool {
	return oc.Spec.TokenEndpointAuthMethod == v1alpha1.AuthNone
}

// hasSecret reports whether the client gets a client secret: a public client has none, and a
// private_key_jwt client proves itself with its own keys, a workload-identity client with its
// platform's token.
func hasSecret(oc *v1alpha1.OAuthClient) bool {
	return !isPublic(oc) && oc.Spec.TokenEndpointAuthMethod != v1alpha1.AuthPrivateKeyJWT && !isWorkload(oc)
}

// clientResult is a resolved OAuthClient. unresolved lists spec.connectors entries that are not
// usable, refused those whose Connector does not grant the client's namespace, and
// resourceConflicts the spec.resources it may not serve (resources.go); the client works
// without them.
type clientResult struct {
	compiled          *config.Client
	project           string
	unresolved        []string
	refused           []string
	resourceConflicts []string
	// staleBundle says why the SPIFFE bundle endpoint's last refresh failed, while the client
	// serves with the last good bundle.
	staleBundle *notReady
}

// client resolves an OAuthClient given its credentials Secret (nil when it does not exist yet):
// the reconciler passes the Secret it just wrote, the compiler the one in the cache.
func (r *resolver) client(ctx context.Context, oc *v1alpha1.OAuthClient, sec *corev1.Secret) (*clientResult, error) {
	res, err := r.clientBase(ctx, oc, sec)
	if err != nil {
		return nil, err
	}
	if err := r.clientResources(ctx, oc, res); err != nil {
		return nil, err
	}
	if err := r.clientConnectors(ctx, oc, res); err != nil {
		return nil, err
	}
	return res, nil
}

// clientBase resolves what decides whether an OAuthClient is Ready: its Project, credentials
// and spec. Its resources and connectors only narrow what a Ready client may do.
func (r *resolver) clientBase(ctx context.Context, oc *v1alpha1.OAuthClient, sec *corev1.Secret) (*clientResult, error) {
	pk := projectKeyOf(oc.Spec.ProjectRef, oc.Namespace)
	pobj, project, err := r.attach(ctx, oc.Spec.ProjectRef, oc.Namespace)
	if err != nil {
		return nil, err
	}
	if err := r.clientIDFree(ctx, oc, pk.String()); err != nil {
		return nil, err
	}
	workload, err := r.clientWorkload(ctx, oc, pobj)
	if err != nil {
		return nil, err
	}
	var secretHash, jwtKey []byte
	if writesCredentials(oc) {
		secretHash, jwtKey, err = clientCredentials(oc, sec)
	} else {
		secretHash, jwtKey, err = r.referencedCredentials(ctx, oc)
	}
	if err != nil {
		return nil, err
	}
	if oc.Spec.AccessTokenFormat == v1alpha1.AccessTokenJWT && len(project.SigningKeys) == 0 {
		return nil, notReadyf(v1alpha1.OAuthClientSigningKeyRequiredReason,
			"accessTokenFormat is jwt but Project %s has no signing keys (spec.signingKeySecretRef or spec.signingKeySource Operator)", pk)
	}
	out, err := clientConfig(oc, secretHash)
	if err != nil {
		return nil, err
	}
	out.SecretJWTKey = jwtKey
	out.Workload = workload
	key := types.NamespacedName{Namespace: oc.Namespace, Name: oc.Name}
	return &clientResult{compiled: out, project: pk.String(), staleBundle: r.staleBundles[key]}, nil
}

// clientConfig compiles what of an OAuthClient needs nothing but its spec and secret hash.
func clientConfig(oc *v1alpha1.OAuthClient, secretHash []byte) (*config.Client, error) {
	grants := make([]string, len(oc.Spec.GrantTypes))
	for i, g := range oc.Spec.GrantTypes {
		grants[i] = string(g)
	}
	if len(grants) == 0 {
		grants = []string{string(v1alpha1.GrantAuthorizationCode), string(v1alpha1.GrantRefreshToken)}
	}
	redirects := make([]string, len(oc.Spec.RedirectURIs))
	for i, u := range oc.Spec.RedirectURIs {
		// CEL cannot say everything the server checks at registration; one function decides
		// for declared and registered clients alike.
		if err := redirect.ValidateRedirectURI(string(u)); err != nil {
			return nil, notReadyf(v1alpha1.OAuthClientInvalidRedirectURIReason, "spec.redirectURIs[%d]: %v", i, err)
		}
		redirects[i] = string(u)
	}
	out := &config.Client{
		ID:                      clientIDFor(oc),
		SecretHash:              secretHash,
		Name:                    cmp.Or(oc.Spec.DisplayName, oc.Name),
		RedirectURIs:            redirects,
		GrantTypes:              grants,
		Scopes:                  scopeStrings(oc.Spec.Scopes),
		TokenEndpointAuthMethod: string(cmp.Or(oc.Spec.TokenEndpointAuthMethod, v1alpha1.AuthClientSecretBasic)),
		AccessTokenFormat:       config.TokenFormat(cmp.Or(oc.Spec.AccessTokenFormat, v1alpha1.AccessTokenOpaque)),
		Source:                  oc.Namespace + "/" + oc.Name,
		RequireDPoP:             oc.Spec.RequireDPoP,
		RequirePAR:              oc.Spec.RequirePushedAuthorizationRequests,
		JWKSURI:                 oc.Spec.JWKSURI,
		MayAct:                  string(oc.Spec.MayAct),
	}
	if oc.Spec.JWKS != "" {
		if _, err := jwks.Parse([]byte(oc.Spec.JWKS)); err != nil {
			return nil, notReadyf(v1alpha1.OAuthClientInvalidJWKSReason, "spec.jwks: %v", err)
		}
		out.JWKS = []byte(oc.Spec.JWKS)
	}
	for _, u := range oc.Spec.Resources {
		out.Resources = append(out.Resources, string(u))
	}
	if bc := oc.Spec.Backchannel; bc != nil {
		out.BackchannelDeliveryMode, out.BackchannelNotificationEndpoint = string(bc.TokenDeliveryMode), bc.ClientNotificationEndpoint
	}
	return out, nil
}

// clientConnectors sorts an OAuthClient's spec.connectors into the usable ones (compiled into
// res.compiled.Connectors), the refused and the unresolved.
func (r *resolver) clientConnectors(ctx context.Context, oc *v1alpha1.OAuthClient, res *clientResult) error {
	for _, name := range oc.Spec.Connectors {
		key := connectorKey(string(name), oc.Namespace)
		refusal, err := r.connectorRefuses(ctx, key, oc.Namespace)
		if err != nil {
			return err
		}
		if refusal != "" {
			res.refused = append(res.refused, refusal)
			continue
		}
		cr, err := r.connectorByKey(ctx, key)
		if err != nil {
			return err
		}
		switch {
		case cr.err != nil:
			nr, _ := asNotReady(cr.err)
			if nr.reason == v1alpha1.OAuthClientConnectorNotFoundReason {
				res.unresolved = append(res.unresolved, nr.message)
			} else {
				res.unresolved = append(res.unresolved, fmt.Sprintf("Connector %s is not ready: %s", key, nr.message))
			}
		case cr.project != res.project:
			res.unresolved = append(res.unresolved, fmt.Sprintf("Connector %s belongs to Project %s, not %s", key, cr.project, res.project))
		default:
			res.compiled.Connectors = append(res.compiled.Connectors, key.String())
		}
	}
	return nil
}

// clientCredentials checks the credentials Secret and returns the client secret's hash (nil for
// a client without a secret). The plaintext leaves this function only for a client_secret_jwt
// client, as jwtKey: verifying an HS256 assertion needs the secret itself, which the server then
// holds in memory only, as it holds Connector secrets; the database never sees it
// (docs/decisions/0038-client-assertions-and-pushed-requests.md).
func clientCredentials(oc *v1alpha1.OAuthClient, sec *corev1.Secret) (hash, jwtKey []byte, err error) {
	name := credentialsSecretName(oc)
	if sec == nil {
		return nil, nil, notReadyf(v1alpha1.OAuthClientSecretPendingReason, "Secret %s/%s (spec.secretName) has not been written yet", oc.Namespace, name)
	}
	if !writesSecret(oc, sec) {
		return nil, nil, secretConflict(oc, sec)
	}
	if !hasSecret(oc) {
		return nil, nil, nil
	}
	v, ok := sec.Data[v1alpha1.ClientSecretSecretKey]
	if !ok {
		return nil, nil, notReadyf(v1alpha1.OAuthClientSecretPendingReason, "Secret %s/%s (spec.secretName) has no %s yet", oc.Namespace, name, v1alpha1.ClientSecretSecretKey)
	}
	if len(v) < clientSecretMinLength {
		return nil, nil, notReadyf(v1alpha1.OAuthClientSecretInvalidReason, "Secret %s/%s key %s is shorter than %d characters; delete the key to have a new secret generated", oc.Namespace, name, v1alpha1.ClientSecretSecretKey, clientSecretMinLength)
	}
	if oc.Spec.TokenEndpointAuthMethod == v1alpha1.AuthClientSecretJWT {
		jwtKey = bytes.Clone(v)
	}
	return secret.Hash(string(v)), jwtKey, nil
}

// referencedCredentials reads the client secret of spec.clientSecretRef, from a Secret whose
// owner opted it in for OAuthClients (v1alpha1.SecretUseOAuthClient): any other Secret reads as
// a missing one, so whoever may write OAuthClients but not read Secrets can neither have a
// Secret's value accepted as their client's secret (and test guesses against it at the token
// endpoint) nor learn whether a Secret exists. As with clientCredentials, the plaintext leaves
// only as jwtKey, for client_secret_jwt.
func (r *resolver) referencedCredentials(ctx context.Context, oc *v1alpha1.OAuthClient) (hash, jwtKey []byte, err error) {
	ref := oc.Spec.ClientSecretRef
	if !hasSecret(oc) {
		// Refused by the CRD; a client without a secret has nothing to read.
		return nil, nil, nil
	}
	v, err := r.secretValue(ctx, oc.Namespace, *ref, "spec.clientSecretRef", v1alpha1.SecretUseOAuthClient)
	if err != nil {
		return nil, nil, err
	}
	if len(v) < clientSecretMinLength {
		return nil, nil, notReadyf(v1alpha1.OAuthClientSecretInvalidReason, "Secret %s/%s (spec.clientSecretRef) key %q is shorter than %d characters", oc.Namespace, ref.Name, ref.Key, clientSecretMinLength)
	}
	if oc.Spec.TokenEndpointAuthMethod == v1alpha1.AuthClientSecretJWT {
		jwtKey = bytes.Clone(v)
	}
	return secret.Hash(string(v)), jwtKey, nil
}

// connectorKey reads "name" or "namespace/name".
func connectorKey(ref, namespace string) types.NamespacedName {
	if ns, name, ok := strings.Cut(ref, "/"); ok {
		return types.NamespacedName{Namespace: ns, Name: name}
	}
	return types.NamespacedName{Namespace: namespace, Name: ref}
}

// ---------------------------------------------------------------------------------------------
// RedirectPolicies

// policy resolves a RedirectPolicy: it is in force when it may attach to a Ready Project.
func (r *resolver) policy(ctx context.Context, p *v1alpha1.RedirectPolicy) (string, error) {
	_, _, err := r.attach(ctx, p.Spec.ProjectRef, p.Namespace)
	return projectKeyOf(p.Spec.ProjectRef, p.Namespace).String(), err
}

// mergeRedirectRules combines the policies attached to the Project in projectNamespace
// (docs/recognised-apps.md). Policies in the Project's own namespace decide: a built-in is recognised when any of them
// enables it, recognised entries are their union, and onlyRecognisedApps is on when any turns it
// on; none means the defaults. A policy from another admitted namespace may only narrow: it can
// turn onlyRecognisedApps on and built-ins off, never add a recognised entry or turn a built-in
// back on (docs/decisions/0020; foreignIgnored says what it lost).
func mergeRedirectRules(projectNamespace string, policies []*v1alpha1.RedirectPolicy) config.RedirectRules {
	var home, foreign []*v1alpha1.RedirectPolicy
	for _, p := range policies {
		if p.Namespace == projectNamespace {
			home = append(home, p)
		} else {
			foreign = append(foreign, p)
		}
	}
	out := config.DefaultRedirectRules()
	if len(home) > 0 {
		out = config.RedirectRules{}
	}
	on := func(b *bool) bool { return b == nil || *b }
	seen := map[config.NamedRedirect]bool{}
	for _, p := range home {
		b := p.Spec.Builtins
		if b == nil {
			b = &v1alpha1.Builtins{}
		}
		out.Claude = out.Claude || on(b.Claude)
		out.ChatGPT = out.ChatGPT || on(b.ChatGPT)
		out.Loopback = out.Loopback || on(b.Loopback)
		out.AppSchemes = out.AppSchemes || on(b.AppSchemes)
		out.OnlyRecognisedApps = out.OnlyRecognisedApps || p.Spec.OnlyRecognisedApps
		for _, rr := range p.Spec.Recognised {
			nr := config.NamedRedirect{Name: rr.Name, Pattern: string(rr.URI)}
			if !seen[nr] {
				seen[nr] = true
				out.Named = append(out.Named, nr)
			}
		}
	}
	off := func(b *bool) bool { return b != nil && !*b }
	for _, p := range foreign {
		if b := p.Spec.Builtins; b != nil {
			out.Claude = out.Claude && !off(b.Claude)
			out.ChatGPT = out.ChatGPT && !off(b.ChatGPT)
			out.Loopback = out.Loopback && !off(b.Loopback)
			out.AppSchemes = out.AppSchemes && !off(b.AppSchemes)
		}
		out.OnlyRecognisedApps = out.OnlyRecognisedApps || p.Spec.OnlyRecognisedApps
	}
	slices.SortFunc(out.Named, func(a, b config.NamedRedirect) int {
		return cmp.Or(cmp.Compare(a.Pattern, b.Pattern), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func scopeStrings(in []v1alpha1.Scope) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}
