package oauth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/jwtbundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/testenv"
	"latchkey.dev/latchkey/internal/workload"
	"latchkey.dev/latchkey/internal/workload/tokenreview"
	"latchkey.dev/latchkey/test/stack"
	"latchkey.dev/latchkey/webhook/oauth"
)

// One kube-apiserver (envtest) for the package's workload tests, started by the first that
// needs it: it mints ServiceAccount tokens (TokenRequest) and reviews them (TokenReview), as a
// cluster does for Latchkey.
var kube struct {
	once sync.Once
	env  *envtest.Environment
	cs   *kubernetes.Clientset
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if kube.env != nil {
		_ = kube.env.Stop()
	}
	os.Exit(code)
}

func cluster(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	testenv.SkipShort(t, "a kube-apiserver and etcd (envtest)")
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("KUBEBUILDER_ASSETS is not set")
		}
		t.Skip("KUBEBUILDER_ASSETS is not set: run hack/control-plane.sh and export KUBEBUILDER_ASSETS=<the directory it prints>")
	}
	kube.once.Do(func() {
		// envtest configures the API server's service-account issuer and signing key, as
		// every cluster has them.
		kube.env = &envtest.Environment{}
		cfg, err := kube.env.Start()
		if err != nil {
			kube.err = err
			return
		}
		kube.cs, kube.err = kubernetes.NewForConfig(cfg)
	})
	if kube.err != nil {
		t.Fatal("starting envtest:", kube.err)
	}
	return kube.cs
}

// widStack is the test stack with workload_identity clients whose ServiceAccounts live in a
// namespace of the test cluster.
type widStack struct {
	*stack.Stack
	t  *testing.T
	cs *kubernetes.Clientset
	ns string
}

const (
	saClient     = "lkc_sa-agent"
	spiffeClient = "lkc_spiffe-agent"
	spiffeID     = "spiffe://example.org/ns/agents/sa/repo-helper"
)

func newWIDStack(t *testing.T, reviewer bool) *widStack {
	cs := cluster(t)
	o := stack.Options{DSN: "sqlite:" + filepath.Join(t.TempDir(), "latchkey.db")}
	if reviewer {
		o.Workloads = &tokenreview.Reviewer{Client: cs.AuthenticationV1()}
	}
	s := stack.New(t, o)
	// The cluster mints tokens on the wall clock; the server's clock starts there too, and
	// tests move it on from there.
	s.Clock.Advance(time.Until(s.Clock.Now()) * -1)
	w := &widStack{Stack: s, t: t, cs: cs, ns: fmt.Sprintf("wid-%d", time.Now().UnixNano()%1e9)}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.serviceAccount("agent")
	w.serviceAccount("other")
	s.Project.Clients[saClient] = &config.Client{
		ID: saClient, Name: "SA Agent", GrantTypes: []string{"client_credentials"}, Scopes: []string{"read"},
		TokenEndpointAuthMethod: "workload_identity",
		Workload:                &config.Workload{ServiceAccountNamespace: w.ns, ServiceAccountName: "agent"},
	}
	return w
}

func (w *widStack) serviceAccount(name string) *corev1.ServiceAccount {
	w.t.Helper()
	sa, err := w.cs.CoreV1().ServiceAccounts(w.ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return sa
}

// token mints a token of the ServiceAccount for audience, bound to pod when it is not nil.
func (w *widStack) token(sa, audience string, pod *corev1.Pod) string {
	w.t.Helper()
	exp := int64(600) // the shortest the API server issues
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := w.cs.CoreV1().ServiceAccounts(w.ns).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return tr.Status.Token
}

// authenticate asks for a client_credentials token with a workload's token as the assertion.
func (w *widStack) authenticate(client, assertionType, assertion string) stack.Answer {
	w.t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "client_assertion_type": {assertionType}, "client_assertion": {assertion}}
	if client != "" {
		form.Set("client_id", client)
	}
	a, err := w.Post(w.t.Context(), "/token", form, "", "")
	if err != nil {
		w.t.Fatal(err)
	}
	return a
}

func wantRefused(t *testing.T, a stack.Answer, status int, code, descContains string) {
	t.Helper()
	if a.Status != status || a.Str("error") != code || a.Str("access_token") != "" || !strings.Contains(a.Str("error_description"), descContains) {
		t.Errorf("want %d %s (%q), got %d %s", status, code, descContains, a.Status, a.Raw)
	}
}

// claimsOf reads a token's claims without verifying it, to forge look-alikes in tests.
func claimsOf(t *testing.T, raw string) map[string]any {
	t.Helper()
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := tok.UnsafeClaimsWithoutVerification(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func sign(t testing.TB, key any, alg jose.SignatureAlgorithm, kid string, claims any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestServiceAccountTokenAuthenticates: a pod's projected token, audience this issuer, gets
// the client a token by client_credentials, again and again until it expires (the kubelet
// reuses it), and the client needs no secret for it.
func TestServiceAccountTokenAuthenticates(t *testing.T) {
	w := newWIDStack(t, true)
	tok := w.token("agent", w.Issuer, nil)
	for range 2 {
		a := w.authenticate(saClient, oauth.AssertionType, tok)
		if a.Status != 200 || a.Str("access_token") == "" || a.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("want a token, got %d %s", a.Status, a.Raw)
		}
	}
}

// TestServiceAccountTokenRefused plays whoever holds a token that is not the client's
// ServiceAccount's, for this issuer, now.
func TestServiceAccountTokenRefused(t *testing.T) {
	w := newWIDStack(t, true)

	t.Run("another ServiceAccount's token", func(t *testing.T) {
		wantRefused(t, w.authenticate(saClient, oauth.AssertionType, w.token("other", w.Issuer, nil)), 401, "invalid_client", "client authentication failed")
	})
	t.Run("a token for another audience", func(t *testing.T) {
		wantRefused(t, w.authenticate(saClient, oauth.AssertionType, w.token("agent", "https://vault.example", nil)), 401, "invalid_client", "aud must be exactly this issuer")
	})
	t.Run("a token for this issuer and another service too", func(t *testing.T) {
		exp := int64(600)
		tr, err := w.cs.CoreV1().ServiceAccounts(w.ns).CreateToken(t.Context(), "agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{w.Issuer, "https://vault.example"}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantRefused(t, w.authenticate(saClient, oauth.AssertionType, tr.Status.Token), 401, "invalid_client", "aud must be exactly this issuer")
	})
	t.Run("a token of another cluster's issuer key", func(t *testing.T) {
		// Every claim as this cluster would write it, signed with another cluster's key.
		claims := claimsOf(t, w.token("agent", w.Issuer, nil))
		other, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		wantRefused(t, w.authenticate(saClient, oauth.AssertionType, sign(t, other, jose.RS256, "other-cluster", claims)), 401, "invalid_client", "client authentication failed")
	})
	t.Run("a legacy token without exp", func(t *testing.T) {
		claims := claimsOf(t, w.token("agent", w.Issuer, nil))
		delete(claims, "exp")
		key, _ := rsa.GenerateKey(rand.Reader, 2048)
		wantRefused(t, w.authenticate(saClient, oauth.AssertionType, sign(t, key, jose.RS256, "k", claims)), 401, "invalid_client", "must carry exp")
	})
	t.Run("no client_id", func(t *testing.T) {
		wantRefused(t, w.authenticate("", oauth.AssertionType, w.token("agent", w.Issuer, nil)), 401, "invalid_client", "client_id is required")
	})
	t.Run("the token as a JWT-SVID", func(t *testing.T) {
		wantRefused(t, w.authenticate(saClient, oauth.SPIFFEAssertionType, w.token("agent", w.Issuer, nil)), 401, "invalid_client", "client authentication failed")
	})
	t.Run("a client secret", func(t *testing.T) {
		for _, sec := range []string{"", "lk_cs_guess-guess-guess-guess-guess-guess"} {
			a := w.MustPost("/token", url.Values{"grant_type": {"client_credentials"}, "client_id": {saClient}, "client_secret": {sec}}, "", "")
			wantRefused(t, a, 401, "invalid_client", "")
			wantRefused(t, w.MustPost("/token", url.Values{"grant_type": {"client_credentials"}}, saClient, sec), 401, "invalid_client", "")
		}
	})
}

// TestServiceAccountTokenEndsWithItsObjects: deleting the ServiceAccount (and making a new one
// of the same name), or the pod a token is bound to, ends the token at once, although it has
// not expired: the cluster's review compares the uids the token names.
func TestServiceAccountTokenEndsWithItsObjects(t *testing.T) {
	w := newWIDStack(t, true)
	ctx := context.Background()
	pod, err := w.cs.CoreV1().Pods(w.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-0"},
		Spec:       corev1.PodSpec{ServiceAccountName: "agent", Containers: []corev1.Container{{Name: "agent", Image: "agent"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound := w.token("agent", w.Issuer, pod)
	if a := w.authenticate(saClient, oauth.AssertionType, bound); a.Status != 200 {
		t.Fatalf("a pod-bound token: %d %s", a.Status, a.Raw)
	}
	zero := int64(0)
	if err := w.cs.CoreV1().Pods(w.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventuallyRefused(t, w, bound, "the token of a deleted pod")

	unbound := w.token("agent", w.Issuer, nil)
	if err := w.cs.CoreV1().ServiceAccounts(w.ns).Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyRefused(t, w, unbound, "the token of a deleted ServiceAccount")
	w.serviceAccount("agent")
	eventuallyRefused(t, w, unbound, "the token of a ServiceAccount deleted and created again (a new uid)")
	if a := w.authenticate(saClient, oauth.AssertionType, w.token("agent", w.Issuer, nil)); a.Status != 200 {
		t.Fatalf("a token of the new ServiceAccount: %d %s", a.Status, a.Raw)
	}
}

// eventuallyRefused: the API server learns of a deletion through its own watch, within moments.
func eventuallyRefused(t *testing.T, w *widStack, tok, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := w.authenticate(saClient, oauth.AssertionType, tok)
		if a.Status == 401 && a.Str("error") == "invalid_client" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still authenticates: %d %s", what, a.Status, a.Raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServiceAccountTokenExpires: on the server's clock, a token is refused once its exp has
// passed, before the cluster is asked.
func TestServiceAccountTokenExpires(t *testing.T) {
	w := newWIDStack(t, true)
	tok := w.token("agent", w.Issuer, nil)
	w.Clock.Advance(600*time.Second + workload.Skew + time.Second)
	wantRefused(t, w.authenticate(saClient, oauth.AssertionType, tok), 401, "invalid_client", "expired")
}

// TestServiceAccountWithoutCluster: a server with no cluster to ask (no-cluster mode) refuses
// a ServiceAccount client and says why.
func TestServiceAccountWithoutCluster(t *testing.T) {
	w := newWIDStack(t, false)
	wantRefused(t, w.authenticate(saClient, oauth.AssertionType, w.token("agent", w.Issuer, nil)), 401, "invalid_client", "needs Latchkey to run in a cluster")
}

// spiffeDomain is a SPIFFE trust domain's JWT-SVID signer.
type spiffeDomain struct {
	td  spiffeid.TrustDomain
	key *ecdsa.PrivateKey
	kid string
}

func newSPIFFEDomain(t *testing.T, name string) *spiffeDomain {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &spiffeDomain{td: spiffeid.RequireTrustDomainFromString(name), key: key, kid: name + "-1"}
}

func (d *spiffeDomain) bundle() *jwtbundle.Bundle {
	return jwtbundle.FromJWTAuthorities(d.td, map[string]crypto.PublicKey{d.kid: d.key.Public()})
}

func (d *spiffeDomain) svid(t *testing.T, sub, aud string, exp time.Time) string {
	return sign(t, d.key, jose.ES256, d.kid, jwt.Claims{
		Subject: sub, Audience: jwt.Audience{aud}, Expiry: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(time.Now()),
	})
}

// TestJWTSVIDClient: a JWT-SVID of the client's SPIFFE ID, signed by its trust domain, for
// this issuer, authenticates; one of another trust domain, another workload of the same
// domain, another audience, or expired, does not.
func TestJWTSVIDClient(t *testing.T) {
	w := newWIDStack(t, true)
	domain, stranger := newSPIFFEDomain(t, "example.org"), newSPIFFEDomain(t, "evil.example")
	w.Project.Clients[spiffeClient] = &config.Client{
		ID: spiffeClient, Name: "SPIFFE Agent", GrantTypes: []string{"client_credentials"}, Scopes: []string{"read"},
		TokenEndpointAuthMethod: "workload_identity",
		Workload:                &config.Workload{SPIFFEID: spiffeID, SPIFFEBundle: domain.bundle()},
	}
	soon := time.Now().Add(5 * time.Minute)
	if a := w.authenticate(spiffeClient, oauth.SPIFFEAssertionType, domain.svid(t, spiffeID, w.Issuer, soon)); a.Status != 200 || a.Str("access_token") == "" {
		t.Fatalf("want a token, got %d %s", a.Status, a.Raw)
	}
	for name, c := range map[string]struct{ svid, typ, desc string }{
		"another trust domain's key and ID":   {stranger.svid(t, "spiffe://evil.example/ns/agents/sa/repo-helper", w.Issuer, soon), oauth.SPIFFEAssertionType, "client authentication failed"},
		"another trust domain's key, this ID": {stranger.svid(t, spiffeID, w.Issuer, soon), oauth.SPIFFEAssertionType, "client authentication failed"},
		"another workload of the domain":      {domain.svid(t, "spiffe://example.org/ns/agents/sa/other", w.Issuer, soon), oauth.SPIFFEAssertionType, "client authentication failed"},
		"another audience":                    {domain.svid(t, spiffeID, "https://vault.example", soon), oauth.SPIFFEAssertionType, "aud must be exactly this issuer"},
		"expired":                             {domain.svid(t, spiffeID, w.Issuer, time.Now().Add(-time.Minute)), oauth.SPIFFEAssertionType, "expired"},
		"as an RFC 7523 assertion":            {domain.svid(t, spiffeID, w.Issuer, soon), oauth.AssertionType, "client authentication failed"},
	} {
		t.Run(name, func(t *testing.T) {
			wantRefused(t, w.authenticate(spiffeClient, c.typ, c.svid), 401, "invalid_client", c.desc)
		})
	}
}

// BenchmarkServiceAccountReview is what a ServiceAccount client's authentication adds to a
// token request: the local checks and one TokenReview at the kube-apiserver (envtest's, on
// loopback).
func BenchmarkServiceAccountReview(b *testing.B) {
	cs := cluster(b)
	ctx := context.Background()
	ns := fmt.Sprintf("wid-bench-%d", time.Now().UnixNano()%1e9)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	const aud = "https://latchkey.test/team/demo"
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{aud}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	rv := &tokenreview.Reviewer{Client: cs.AuthenticationV1()}
	w := &config.Workload{ServiceAccountNamespace: ns, ServiceAccountName: "agent"}
	b.ResetTimer()
	for b.Loop() {
		if _, err := workload.VerifyServiceAccount(ctx, rv, tr.Status.Token, w, aud, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJWTSVIDVerify is a JWT-SVID client's authentication: parsing and one ES256
// verification with the compiled bundle, no request anywhere.
func BenchmarkJWTSVIDVerify(b *testing.B) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	d := &spiffeDomain{td: spiffeid.RequireTrustDomainFromString("example.org"), key: key, kid: "k1"}
	const aud = "https://latchkey.test/team/demo"
	svid := sign(b, d.key, jose.ES256, d.kid, jwt.Claims{Subject: spiffeID, Audience: jwt.Audience{aud},
		Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour)), IssuedAt: jwt.NewNumericDate(time.Now())})
	w := &config.Workload{SPIFFEID: spiffeID, SPIFFEBundle: d.bundle()}
	for b.Loop() {
		if _, err := workload.VerifySVID(svid, w, aud, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}
