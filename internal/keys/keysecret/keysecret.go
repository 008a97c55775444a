// Package keysecret keeps the operator's keys in a Kubernetes Secret (--keys-secret,
// docs/operations.md): the Loader reads it on every replica, the Keeper creates, rotates and
// re-seals on the elected one. It is the part of key handling that talks to the API server, apart
// from package keys so a build without a cluster links none of it (docs/decisions/0085).
package keysecret

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/internal/keptsecret"
	"latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/secret"
)

// defaultPoll is how often the Loader reads the Secret again.
const defaultPoll = 10 * time.Second

// Loader reads the keys Secret on every replica (it does not need leader election): it waits
// until the Secret exists, then gives the Keyring its sealing keys and Signing its signing keys,
// and reads the Secret again every Poll so a rotation reaches every replica without a restart.
type Loader struct {
	// Reader reads the Secret straight from the API server: the installation's namespace may
	// not be among the watched ones the cache holds.
	Reader  client.Reader
	Secret  types.NamespacedName
	Keyring *secret.Keyring
	Signing *keys.Signing
	// Changed, when set, is called after every change of keys (the compiler compiles again).
	Changed func()
	Now     func() time.Time
	// Poll defaults to 10s.
	Poll time.Duration
	Log  logr.Logger

	loaded  chan struct{}
	version string
	primary string
}

// NewLoader returns a Loader; set its fields before Start.
func NewLoader() *Loader { return &Loader{loaded: make(chan struct{})} }

func (l *Loader) NeedLeaderElection() bool { return false }

// Ready is nil once keys are loaded; /-/readyz waits for it.
func (l *Loader) Ready(context.Context) error {
	select {
	case <-l.loaded:
		return nil
	default:
		return fmt.Errorf("keys Secret %s not loaded yet", l.Secret)
	}
}

// WaitLoaded blocks until keys are loaded or ctx ends.
func (l *Loader) WaitLoaded(ctx context.Context) error {
	select {
	case <-l.loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Loader) Start(ctx context.Context) error {
	poll := l.Poll
	if poll <= 0 {
		poll = defaultPoll
	}
	keptsecret.Follow(ctx, poll, l.load, func() bool { return l.Ready(ctx) == nil },
		l.Log.WithValues("secret", l.Secret.String()), "the keys Secret",
		"waiting for the keys Secret: the elected replica creates it, or create it yourself")
	return nil
}

func (l *Loader) load(ctx context.Context) error {
	var sec corev1.Secret
	if err := l.Reader.Get(ctx, l.Secret, &sec); err != nil {
		return err
	}
	now := l.Now()
	var set *keys.Set
	if sec.ResourceVersion == l.version {
		// Nothing new, but a next sealing key may have become primary since.
		if set = l.Signing.Keys(); set == nil || set.PrimarySealing(now) == l.primary {
			return nil
		}
	} else {
		var err error
		if set, err = keys.Parse(sec.Data); err != nil {
			return err
		}
	}
	primary := set.PrimarySealing(now)
	if len(set.Sealing) == 0 {
		return errors.New("the keys Secret holds no sealing key yet")
	}
	if err := l.Keyring.Replace(set.Sealing, primary); err != nil {
		return err
	}
	l.Signing.Store(set)
	changed := l.version != "" && l.version != sec.ResourceVersion
	l.version, l.primary = sec.ResourceVersion, primary
	select {
	case <-l.loaded:
	default:
		close(l.loaded)
		l.Log.Info("keys loaded", "secret", l.Secret.String(), "sealing", l.Keyring.IDs(), "sealingPrimary", primary,
			"signing", signingIDs(set))
	}
	if changed {
		l.Log.Info("keys changed", "sealing", l.Keyring.IDs(), "sealingPrimary", primary, "signing", signingIDs(set))
	}
	if l.Changed != nil {
		l.Changed()
	}
	return nil
}

func signingIDs(s *keys.Set) []string {
	ids := make([]string, len(s.Signing))
	for i, k := range s.Signing {
		ids[i] = k.ID
	}
	return ids
}

// Keeper is the elected replica's part (with SQLite, the one replica's): it creates the keys
// Secret when it is missing, rotates signing keys on schedule or when asked, removes signing
// keys no JWKS publishes any more, promotes a new sealing key and re-seals stored values with it.
// It is the only writer of the Secret, and every write names the version it read, so a write
// racing another (a second leader for a moment, an admin's annotation) fails and is retried
// from a fresh read rather than overwriting it.
type Keeper struct {
	// Client reads (uncached) and writes the Secret.
	Client client.Client
	Secret types.NamespacedName
	// Create: make the Secret when it is missing (the chart's keys.generate). Without it the
	// Keeper waits for an admin to create it.
	Create bool
	// Announce, Retire and RotateEvery are the signing schedule; RotateEvery 0 rotates only
	// when asked with keys.RotateSigningAnnotation. SealingAnnounce defaults to 2m.
	Announce, Retire, RotateEvery, SealingAnnounce time.Duration
	// LongestTokenLifetime, when set, returns the longest JWT lifetime of any Project; a
	// retired key is kept at least that long.
	LongestTokenLifetime func() time.Duration
	Reseal               *Resealer
	Now                  func() time.Time
	// Tick is how often the Secret is looked at; defaults to one minute.
	Tick time.Duration
	Log  logr.Logger
}

func (k *Keeper) NeedLeaderElection() bool { return true }

func (k *Keeper) Start(ctx context.Context) error {
	keptsecret.Keep(ctx, k.Tick, k.Step, k.Log.WithValues("secret", k.Secret.String()), "the keys Secret")
	return nil
}

// Step does one round of the Keeper's work; tests call it directly.
func (k *Keeper) Step(ctx context.Context) error {
	sec, created, err := k.ensure(ctx)
	if err != nil || created || sec == nil {
		return err
	}
	set, err := keys.Parse(sec.Data)
	if err != nil {
		// Never "repaired": rewriting a Secret that does not parse could drop a key.
		return fmt.Errorf("the keys Secret does not parse, so it is left as it is: %w", err)
	}
	if k.plan(set, sec.Annotations) {
		data, err := set.Data()
		if err != nil {
			return err
		}
		sec.Data = data
		keptsecret.Mark(sec, "keys")
		if err := k.Client.Update(ctx, sec); err != nil {
			return fmt.Errorf("writing the keys Secret: %w", err)
		}
		k.Log.Info("keys Secret updated", "signing", signingIDs(set), "sealingPrimary", set.State.SealingPrimary,
			"sealingNext", set.State.SealingNext)
	}
	if r := set.State.Reseal; k.Reseal != nil && r != nil && r.DoneAt.IsZero() && r.To == set.PrimarySealing(k.Now()) {
		return k.Reseal.Run(ctx, k, set)
	}
	return nil
}

// ensure reads the Secret, creating it when it is missing and Create is set. Creating is
// create-only: if another replica (or an admin) created it first, that one is kept, and the
// Keeper goes on with what is stored.
func (k *Keeper) ensure(ctx context.Context) (*corev1.Secret, bool, error) {
	var sec corev1.Secret
	err := k.Client.Get(ctx, k.Secret, &sec)
	if err == nil {
		return &sec, false, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	if !k.Create {
		k.Log.Info("the keys Secret does not exist and keys.generate is off: waiting for it", "secret", k.Secret.String())
		return nil, false, nil
	}
	data, err := keys.New(k.Now()).Data()
	if err != nil {
		return nil, false, err
	}
	sec = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: k.Secret.Name, Namespace: k.Secret.Namespace,
			Labels: keptsecret.Labels("keys"),
			Annotations: map[string]string{
				"latchkey.dev/keys": "Sealing and signing keys kept by Latchkey. Losing them loses every " +
					"upstream token sealed with them: back this Secret up (docs/operations.md).",
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	// No owner reference: the Secret must outlive the Deployment and the release.
	created, err := keptsecret.Create(ctx, k.Client, &sec)
	if err != nil {
		return nil, false, fmt.Errorf("creating the keys Secret: %w", err)
	}
	if !created {
		k.Log.Info("the keys Secret was created meanwhile by someone else; using it", "secret", k.Secret.String())
		return nil, false, nil // the next Step reads it
	}
	k.Log.Info("created the keys Secret", "secret", k.Secret.String())
	return &sec, true, nil
}

// plan applies what is due to set and reports whether it changed.
func (k *Keeper) plan(set *keys.Set, annotations map[string]string) bool {
	now := k.Now()
	changed := false
	if set.State.Handled == nil {
		set.State.Handled = map[string]string{}
	}
	announce := k.Announce
	switch {
	case len(set.Signing) == 0:
		// A Secret made by hand or by an earlier chart: nothing was signed before, so the
		// first key signs at once.
		set.AddSigning(now, 0)
		changed = true
	case k.asked(set, annotations, keys.RotateSigningAnnotation):
		set.AddSigning(now, announce)
		k.Log.Info("rotating the signing key on request", "signsFrom", now.Add(announce))
		changed = true
	case k.RotateEvery > 0 && k.due(set, now):
		set.AddSigning(now, announce)
		k.Log.Info("rotating the signing key on schedule", "signsFrom", now.Add(announce))
		changed = true
	}
	retire := k.Retire
	if k.LongestTokenLifetime != nil {
		retire = max(retire, k.LongestTokenLifetime())
	}
	if set.Prune(now, retire) {
		changed = true
	}
	if k.asked(set, annotations, keys.RotateSealingAnnotation) {
		if set.State.SealingNext != "" {
			k.Log.Info("a new sealing key is already on its way; the request is recorded and not repeated")
		} else {
			sa := k.SealingAnnounce
			if sa <= 0 {
				sa = keys.DefaultSealingAnnounce
			}
			id := set.AddSealing(now, sa)
			k.Log.Info("new sealing key added; it seals once every replica has it", "id", id, "sealsFrom", now.Add(sa))
		}
		changed = true
	}
	if set.Promote(now) {
		k.Log.Info("new sealing key now seals; re-sealing stored values with it", "id", set.State.SealingPrimary)
		changed = true
	}
	return changed
}

// asked reports (and records) an annotation value not acted on before.
func (k *Keeper) asked(set *keys.Set, annotations map[string]string, name string) bool {
	v := annotations[name]
	if v == "" || set.State.Handled[name] == v {
		return false
	}
	set.State.Handled[name] = v
	return true
}

// due: the newest signing key was published RotateEvery ago, and is already signing (a key
// still being announced is not replaced).
func (k *Keeper) due(set *keys.Set, now time.Time) bool {
	newest := set.Signing[len(set.Signing)-1]
	return !now.Before(newest.ActiveAt) && !now.Before(newest.PublishedAt.Add(k.RotateEvery))
}

// writeState stores set's state (the re-seal's progress) and the re-seal annotation, retrying
// on a conflicting write by reading again: key material is taken from the fresh read, never
// from set, so nothing an admin or another writer added is lost.
func (k *Keeper) writeState(ctx context.Context, reseal keys.Reseal, note string) error {
	for range 5 {
		var sec corev1.Secret
		if err := k.Client.Get(ctx, k.Secret, &sec); err != nil {
			return err
		}
		cur, err := keys.Parse(sec.Data)
		if err != nil {
			return err
		}
		if cur.State.Reseal == nil || cur.State.Reseal.To != reseal.To {
			return errResealSuperseded
		}
		cur.State.Reseal = &reseal
		data, err := cur.Data()
		if err != nil {
			return err
		}
		sec.Data = data
		sec.Annotations = maps.Clone(sec.Annotations)
		if sec.Annotations == nil {
			sec.Annotations = map[string]string{}
		}
		sec.Annotations[keys.ResealAnnotation] = note
		keptsecret.Mark(&sec, "keys")
		err = k.Client.Update(ctx, &sec)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return errors.New("the keys Secret kept changing while recording the re-seal's progress")
}

var errResealSuperseded = errors.New("another sealing key became primary; its re-seal takes over")
