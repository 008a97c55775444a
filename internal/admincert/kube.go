package admincert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/internal/keptsecret"
)

// DNSNames are the names the kube-apiserver may dial the admin Service by; it checks the
// serving certificate against the first, <service>.<namespace>.svc.
func DNSNames(service, namespace string) []string {
	return []string{service + "." + namespace + ".svc", service + "." + namespace}
}

// Keeper is the elected replica's part (with SQLite, the one replica's): it creates the Secret
// when it is missing, renews the certificate before it expires, and keeps the APIService's
// caBundle equal to the Secret's bundle. It is the only writer of both, and every Secret write
// names the version it read, so two replicas racing (a second leader for a moment) never
// overwrite each other: the loser's write fails and it reads again.
type Keeper struct {
	// Client reads (uncached) and writes the Secret and the APIService.
	Client client.Client
	Secret types.NamespacedName
	// DNSNames the certificate is for; see DNSNames.
	DNSNames []string
	// APIService is the name of the APIService whose caBundle is kept.
	APIService string
	// Validity, RenewBefore and Announce default to DefaultValidity, DefaultRenewBefore and
	// DefaultAnnounce.
	Validity, RenewBefore, Announce time.Duration
	Now                             func() time.Time
	// Tick is how often the Secret is looked at; defaults to one minute.
	Tick time.Duration
	Log  logr.Logger
}

func (k *Keeper) NeedLeaderElection() bool { return true }

func (k *Keeper) Start(ctx context.Context) error {
	keptsecret.Keep(ctx, k.Tick, k.Step, k.Log.WithValues("secret", k.Secret.String()), "the admin API's serving certificate")
	return nil
}

func (k *Keeper) validity() time.Duration { return cmpOr(k.Validity, DefaultValidity) }
func (k *Keeper) renewBefore() time.Duration {
	return cmpOr(k.RenewBefore, DefaultRenewBefore)
}
func (k *Keeper) announce() time.Duration { return cmpOr(k.Announce, DefaultAnnounce) }

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Step does one round of the Keeper's work; tests call it directly.
func (k *Keeper) Step(ctx context.Context) error {
	sec, err := k.ensure(ctx)
	if err != nil || sec == nil {
		return err
	}
	st, err := parse(sec.Data)
	if err != nil {
		return fmt.Errorf("the admin API's certificate Secret %s does not parse, so it is left as it is (delete it to have a new one made): %w",
			k.Secret, err)
	}
	published, err := k.published(ctx)
	if err != nil {
		return err
	}
	if k.plan(st, published) {
		sec.Data = st.data()
		keptsecret.Mark(sec, "admin-api")
		if err := k.Client.Update(ctx, sec); err != nil {
			return fmt.Errorf("writing the admin API's certificate Secret: %w", err)
		}
	}
	return k.publish(ctx, st.bundle)
}

// ensure reads the Secret, creating it when it is missing. Creating is create-only: if another
// replica (or an admin) created it first, that one is kept and read on the next Step.
func (k *Keeper) ensure(ctx context.Context) (*corev1.Secret, error) {
	var sec corev1.Secret
	err := k.Client.Get(ctx, k.Secret, &sec)
	if err == nil {
		return &sec, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	is, err := issue(k.DNSNames, k.Now(), k.validity())
	if err != nil {
		return nil, err
	}
	st := &state{bundle: []*x509.Certificate{is.ca}, curPEM: is.certPEM, curKey: is.keyPEM}
	sec = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: k.Secret.Name, Namespace: k.Secret.Namespace,
			Labels: keptsecret.Labels("admin-api"),
			Annotations: map[string]string{
				"latchkey.dev/admin-cert": "The admin API's serving certificate, kept and renewed by Latchkey; " +
					"ca.crt is the APIService's caBundle (docs/admin.md).",
			},
		},
		Type: corev1.SecretTypeTLS,
		Data: st.data(),
	}
	// No owner reference: a Deployment deleted and made again must not take a new CA with it
	// while the APIService still trusts the old one.
	created, err := keptsecret.Create(ctx, k.Client, &sec)
	if err != nil {
		return nil, fmt.Errorf("creating the admin API's certificate Secret: %w", err)
	}
	if !created {
		k.Log.Info("the admin API's certificate Secret was created meanwhile by someone else; using it", "secret", k.Secret.String())
		return nil, nil
	}
	k.Log.Info("created the admin API's serving certificate", "secret", k.Secret.String(), "dnsName", k.DNSNames[0],
		"notAfter", is.ca.NotAfter)
	return &sec, nil
}

// plan applies what is due to st and reports whether it changed. published is the APIService's
// caBundle as the kube-apiserver holds it now.
func (k *Keeper) plan(st *state, published []*x509.Certificate) bool {
	now := k.Now()
	changed := false
	// A certificate whose CA is in the published bundle, announced long enough ago, now
	// serves. Its CA reached the kube-apiserver first, so no request fails on the switch; the
	// old CA stays in the bundle until the old certificate expires, for replicas that have not
	// read the Secret again yet.
	if st.next != nil && !now.Before(st.next.NotBefore.Add(backdate+k.announce())) &&
		verifies(published, st.next, k.DNSNames[0], now) {
		st.cur, st.curPEM, st.curKey = st.next, st.nextPEM, st.nextKey
		st.next, st.nextPEM, st.nextKey = nil, nil, nil
		k.Log.Info("the renewed admin API certificate now serves", "notAfter", st.cur.NotAfter)
		changed = true
	}
	// Renew: due before expiry, or the Service's names changed.
	if st.next == nil && (now.After(st.cur.NotAfter.Add(-k.renewBefore())) || !covers(st.cur, k.DNSNames)) {
		is, err := issue(k.DNSNames, now, k.validity())
		if err != nil {
			k.Log.Error(err, "renewing the admin API's serving certificate")
		} else {
			leaf, _ := leaf(is.certPEM, is.keyPEM)
			st.next, st.nextPEM, st.nextKey = leaf, is.certPEM, is.keyPEM
			st.bundle = append(st.bundle, is.ca)
			k.Log.Info("renewed the admin API's serving certificate; it serves once the APIService trusts it",
				"servesFrom", now.Add(k.announce()), "notAfter", leaf.NotAfter)
			changed = true
		}
	}
	// CAs whose certificates have expired leave the bundle.
	kept := slices.DeleteFunc(slices.Clone(st.bundle), func(ca *x509.Certificate) bool { return now.After(ca.NotAfter) })
	if len(kept) != len(st.bundle) && len(kept) > 0 {
		st.bundle, changed = kept, true
	}
	return changed
}

func (k *Keeper) apiService(ctx context.Context) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiregistration.k8s.io/v1")
	u.SetKind("APIService")
	err := k.Client.Get(ctx, client.ObjectKey{Name: k.APIService}, u)
	return u, err
}

// published returns the APIService's caBundle; nothing when it does not exist.
func (k *Keeper) published(ctx context.Context) ([]*x509.Certificate, error) {
	u, err := k.apiService(ctx)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading APIService %s: %w", k.APIService, err)
	}
	return bundleOf(u)
}

func bundleOf(u *unstructured.Unstructured) ([]*x509.Certificate, error) {
	b, err := caBundleBytes(u)
	if err != nil {
		return nil, err
	}
	return certs(b)
}

// caBundleBytes reads spec.caBundle, base64 in the object's JSON.
func caBundleBytes(u *unstructured.Unstructured) ([]byte, error) {
	s, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle")
	if s == "" {
		return nil, nil
	}
	return decodeBase64(s)
}

// publish writes bundle into the APIService's caBundle when it differs. An APIService that
// does not exist (yet: Helm creates it beside the Deployment) is waited for.
func (k *Keeper) publish(ctx context.Context, bundle []*x509.Certificate) error {
	want := encodeBundle(bundle)
	for range 5 {
		u, err := k.apiService(ctx)
		if apierrors.IsNotFound(err) {
			k.Log.Info("the APIService does not exist; its caBundle is written once it does", "apiService", k.APIService)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading APIService %s: %w", k.APIService, err)
		}
		if have, _ := caBundleBytes(u); bytes.Equal(have, want) {
			return nil
		}
		before := u.DeepCopy()
		if err := unstructured.SetNestedField(u.Object, encodeBase64(want), "spec", "caBundle"); err != nil {
			return err
		}
		// A merge patch names caBundle only, and carries the version read, so it overwrites
		// neither another field nor a concurrent write; on a conflict it reads again.
		err = k.Client.Patch(ctx, u, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing APIService %s's caBundle: %w", k.APIService, err)
		}
		k.Log.Info("wrote the APIService's caBundle", "apiService", k.APIService, "cas", len(bundle))
		return nil
	}
	return fmt.Errorf("APIService %s kept changing while writing its caBundle", k.APIService)
}

// Loader reads the Secret on every replica (it does not need leader election) and gives the
// admin listener its certificate, reading again every Poll so a renewal reaches every replica
// without a restart.
type Loader struct {
	// Reader reads the Secret straight from the API server: the installation's namespace may
	// not be among the watched ones the cache holds.
	Reader client.Reader
	Secret types.NamespacedName
	// Poll defaults to 10s.
	Poll time.Duration
	Log  logr.Logger

	cert    atomic.Pointer[tls.Certificate]
	version string
}

func (l *Loader) NeedLeaderElection() bool { return false }

// GetCertificate serves the loaded certificate; until there is one, handshakes fail (the
// APIService reports itself unavailable meanwhile).
func (l *Loader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := l.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errNotLoaded
}

func (l *Loader) Start(ctx context.Context) error {
	keptsecret.Follow(ctx, l.Poll, l.Load, func() bool { return l.cert.Load() != nil },
		l.Log.WithValues("secret", l.Secret.String()), "the admin API's certificate Secret",
		"waiting for the admin API's certificate Secret: the elected replica creates it")
	return nil
}

// Load reads the Secret once; tests call it directly.
func (l *Loader) Load(ctx context.Context) error {
	var sec corev1.Secret
	if err := l.Reader.Get(ctx, l.Secret, &sec); err != nil {
		return err
	}
	if sec.ResourceVersion == l.version {
		return nil
	}
	pair, err := tls.X509KeyPair(sec.Data[CertKey], sec.Data[KeyKey])
	if err != nil {
		return fmt.Errorf("%s: %w", l.Secret, err)
	}
	first := l.cert.Swap(&pair) == nil
	l.version = sec.ResourceVersion
	if first {
		l.Log.Info("admin API serving certificate loaded", "secret", l.Secret.String())
	} else {
		l.Log.Info("admin API serving certificate changed", "secret", l.Secret.String())
	}
	return nil
}
