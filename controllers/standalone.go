package controllers

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"latchkey.dev/latchkey/api/v1alpha1"
)

// Objects is a complete set of Latchkey resources with the Namespaces and Secrets they refer to,
// held somewhere other than an API server (the no-cluster mode reads them from files,
// docs/no-cluster.md). Every object must already be what the API server would have stored:
// admitted against its CRD (defaults filled in), with a uid, a creation time and a generation.
type Objects struct {
	Namespaces       []corev1.Namespace
	Secrets          []corev1.Secret
	Projects         []v1alpha1.Project
	OAuthClients     []v1alpha1.OAuthClient
	Connectors       []v1alpha1.Connector
	RedirectPolicies []v1alpha1.RedirectPolicy
}

// Standalone does, in one pass over Objects, what the four reconcilers and the Compiler do for
// the objects an API server holds: it runs the reconcilers' own status phases on every object
// and the Compiler's own compile function on the whole set, through a reader with the cache's
// field indexes. There is one compile path; only where the objects come from differs. Events
// become log lines, since there is no API server to keep them.
type Standalone struct {
	opts    Options
	log     logr.Logger
	version uint64
}

// NewStandalone checks opts as Setup does. opts.Config receives each snapshot; opts.Store, when
// set, is where RedirectPolicy enforcement revokes tokens.
func NewStandalone(opts Options, log logr.Logger) (*Standalone, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return &Standalone{opts: opts, log: log}, nil
}

// Apply sets the status of every object in objs (in place, starting from the status each
// carries in, so transition times and status.revokedTokens carry over from the previous Apply),
// then compiles objs and publishes the snapshot to Options.Config. Each OAuthClient's
// credentials Secret must be among objs.Secrets when it exists (CredentialsSecret makes it). A
// RedirectPolicy that turns onlyRecognisedApps on revokes the live tokens of refused clients,
// as its reconciler does. A status phase that fails (the store, while enforcing) is logged and
// does not hold the snapshot back; an error is a failure to compile, and then nothing is
// published and the previous snapshot keeps serving.
//
//nolint:funlen // the phases run in the order the reconcilers run them; split, that order hides
func (s *Standalone) Apply(ctx context.Context, objs *Objects) error {
	ctx = logr.NewContext(ctx, s.log)
	mem := newMemReader()
	if err := addIndexes(ctx, mem); err != nil {
		return err
	}
	for i := range objs.Namespaces {
		mem.add(&objs.Namespaces[i])
	}
	for i := range objs.Secrets {
		mem.add(&objs.Secrets[i])
	}
	for i := range objs.Projects {
		mem.add(&objs.Projects[i])
	}
	for i := range objs.OAuthClients {
		mem.add(&objs.OAuthClients[i])
	}
	for i := range objs.Connectors {
		mem.add(&objs.Connectors[i])
	}
	for i := range objs.RedirectPolicies {
		mem.add(&objs.RedirectPolicies[i])
	}

	b := base{
		reader:    mem,
		recorder:  logRecorder{log: s.log.WithName("events")},
		publicURL: s.opts.PublicURL,
		clock:     s.opts.Clock,
	}
	res := func() *resolver { return newResolver(mem, s.opts.PublicURL) }
	var errs []error

	pr := &projectPhases{base: b}
	for i := range objs.Projects {
		p := &objs.Projects[i]
		errs = append(errs, status(ctx, &b, p, projectKind, &projectScope{project: p, res: res()},
			pr.reconcileIssuer, pr.reconcileReady))
	}
	cr := &connectorPhases{base: b}
	for i := range objs.Connectors {
		c := &objs.Connectors[i]
		errs = append(errs, status(ctx, &b, c, connectorKind, &connectorScope{conn: c, res: res()},
			cr.reconcileCallback, cr.reconcileReady))
	}
	quiet := b
	quiet.quietFirstReady = true
	ocr := &clientPhases{base: quiet}
	if s.opts.Store != nil {
		ocr.holders = s.opts.Store
	}
	// Every client's id first: whether one client is Ready (and so owns a resource URL) depends
	// on its status.clientID, which the others' phases read.
	for i := range objs.OAuthClients {
		if err := ocr.holdClientID(ctx, &clientScope{oc: &objs.OAuthClients[i], res: res()}); err != nil {
			if _, ok := asNotReady(err); !ok {
				errs = append(errs, err)
			}
		}
	}
	for i := range objs.OAuthClients {
		oc := &objs.OAuthClients[i]
		scope := &clientScope{oc: oc, res: res()}
		sec := &corev1.Secret{}
		if err := mem.Get(ctx, types.NamespacedName{Namespace: oc.Namespace, Name: credentialsSecretName(oc)}, sec); err == nil {
			scope.secret = sec
		}
		errs = append(errs, status(ctx, &quiet, oc, oauthClientKind, scope,
			standaloneClientStatus, ocr.reconcileReady, ocr.reconcileRedirects))
	}
	rpr := &policyPhases{base: b, store: s.opts.Store, documents: s.opts.ClientDocuments}
	for i := range objs.RedirectPolicies {
		p := &objs.RedirectPolicies[i]
		errs = append(errs, status(ctx, &b, p, redirectPolicyKind, &policyScope{policy: p, res: res()},
			rpr.reconcileReady, rpr.reconcileIgnored, rpr.reconcileEnforcement))
	}
	// As in a cluster, where a reconciler's error is retried on its own and never holds the
	// Compiler back: a failed status phase (the store, while enforcing) is logged, and the
	// next Apply runs it again.
	if err := errors.Join(errs...); err != nil {
		s.log.Error(err, "setting status; retried at the next change or enforcement interval")
	}

	snap, _, err := compile(ctx, mem, s.opts.PublicURL, s.opts.SigningKeys, nil)
	if err != nil {
		return err
	}
	s.version++
	snap.Version = s.version
	s.opts.Config.Store(snap)
	return nil
}

// standaloneClientStatus is the part of reconcileSecret that is status: the Secret itself is
// written by whoever keeps the Secrets (CredentialsSecret says what to write).
func standaloneClientStatus(_ context.Context, s *clientScope) (Result, error) {
	s.oc.Status.SecretName = credentialsSecretName(s.oc)
	return Result{}, nil
}

// status is reconcileWith without the API server: the same phases, observedGeneration advanced
// only when all of them ran, and the same Events for Ready and Degraded transitions.
func status[T Object, S any](ctx context.Context, b *base, obj T, kind statusKind[T], scope S, phases ...phase[S]) error {
	before := obj.DeepCopyObject().(T)
	_, err := runPhases(ctx, scope, phases...)
	if err == nil {
		*kind.status(obj).observedGeneration = obj.GetGeneration()
	}
	b.readyEvent(obj,
		meta.FindStatusCondition(*kind.status(before).conditions, v1alpha1.ReadyCondition),
		meta.FindStatusCondition(*kind.status(obj).conditions, v1alpha1.ReadyCondition))
	b.degradedEvent(obj,
		meta.FindStatusCondition(*kind.status(before).conditions, v1alpha1.DegradedCondition),
		meta.FindStatusCondition(*kind.status(obj).conditions, v1alpha1.DegradedCondition))
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", reflect.TypeOf(obj).Elem().Name(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// logRecorder writes Events to the log, where the no-cluster mode keeps them.
type logRecorder struct{ log logr.Logger }

func (l logRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	kv := []any{"type", eventtype, "reason", reason, "action", action}
	if o, ok := regarding.(metav1.Object); ok {
		kv = append(kv, "object", fmt.Sprintf("%s %s/%s", reflect.TypeOf(regarding).Elem().Name(), o.GetNamespace(), o.GetName()))
	}
	l.log.Info(fmt.Sprintf(note, args...), kv...)
}

func (l logRecorder) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	l.Eventf(regarding, related, eventtype, reason, action, note, args...)
}
