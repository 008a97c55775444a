package controllers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Object is a Kubernetes object the resolver reads: every Latchkey kind, Secret, ConfigMap and
// Namespace. It is controller-runtime's client.Object by another name, so either converts to
// the other.
type Object interface {
	metav1.Object
	runtime.Object
}

// ObjectList is a list of one kind (controller-runtime's client.ObjectList by another name).
type ObjectList interface {
	metav1.ListInterface
	runtime.Object
}

// Reader is everything the status phases, the resolver and the compiler read, and all they
// need of where the objects are: Get by key, and List of one kind, in one namespace or all,
// matching indexed fields. In a cluster it is the manager's cache (clusterReader, over
// controller-runtime's client.Reader); without one it is a memReader over the objects read
// from files. Being Latchkey's own, it keeps controller-runtime's client, and the client-go
// it links, out of the build that serves without a cluster (docs/decisions/0085).
type Reader interface {
	// Get reads the object named key into obj; a missing one is a NotFound error
	// (apierrors.IsNotFound).
	Get(ctx context.Context, key types.NamespacedName, obj Object, opts ...GetOption) error
	// List fills list's Items, sorted or not, with the objects that opts select.
	List(ctx context.Context, list ObjectList, opts ...ListOption) error
}

// GetOption modifies a Get.
type GetOption interface{ applyToGet(*ReadOptions) }

// ListOption modifies a List.
type ListOption interface{ applyToList(*ReadOptions) }

// ReadOptions is what the options of one Get or List say.
type ReadOptions struct {
	// Namespace limits a List to one namespace; empty: all.
	Namespace string
	// Fields are exact matches on field indexes (addIndexes).
	Fields map[string]string
	// NoCopy lets the reader hand out the objects it holds rather than copies: the caller
	// never modifies them.
	NoCopy bool
}

// InNamespace limits a List to one namespace.
type InNamespace string

func (n InNamespace) applyToList(o *ReadOptions) { o.Namespace = string(n) }

// MatchingFields selects the objects whose indexed fields (addIndexes) hold these values.
type MatchingFields map[string]string

func (f MatchingFields) applyToList(o *ReadOptions) {
	if o.Fields == nil {
		o.Fields = map[string]string{}
	}
	for k, v := range f {
		o.Fields[k] = v
	}
}

type noCopyOption struct{}

func (noCopyOption) applyToGet(o *ReadOptions)  { o.NoCopy = true }
func (noCopyOption) applyToList(o *ReadOptions) { o.NoCopy = true }

// noCopy reads straight from the informer cache: the resolver never modifies what it reads.
var noCopy noCopyOption

// listOptions applies opts.
func listOptions(opts []ListOption) ReadOptions {
	var o ReadOptions
	for _, opt := range opts {
		opt.applyToList(&o)
	}
	return o
}

// getOptions applies opts.
func getOptions(opts []GetOption) ReadOptions {
	var o ReadOptions
	for _, opt := range opts {
		opt.applyToGet(&o)
	}
	return o
}

// IndexerFunc returns the values of one indexed field of an object.
type IndexerFunc func(Object) []string

// FieldIndexer registers a field index (addIndexes): the manager's cache in a cluster, a
// memReader without one.
type FieldIndexer interface {
	IndexField(ctx context.Context, obj Object, field string, fn IndexerFunc) error
}

// objectKey is obj's namespace and name.
func objectKey(obj metav1.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// ignoreNotFound is nil for a NotFound error, err otherwise.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// EventRecorder records Events about an object: client-go's events.EventRecorder in a cluster,
// log lines without one (logRecorder).
type EventRecorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Result says when to run a reconcile again: RequeueAfter, when above zero.
type Result struct {
	RequeueAfter time.Duration
}
