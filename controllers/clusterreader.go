//go:build !latchkey_local

package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// clusterReader is the Reader over controller-runtime's client.Reader: the manager's cache, or
// its client, which reads from the cache.
type clusterReader struct{ c client.Reader }

func (r clusterReader) Get(ctx context.Context, key types.NamespacedName, obj Object, opts ...GetOption) error {
	if getOptions(opts).NoCopy {
		return r.c.Get(ctx, key, obj, client.UnsafeDisableDeepCopy)
	}
	return r.c.Get(ctx, key, obj)
}

func (r clusterReader) List(ctx context.Context, list ObjectList, opts ...ListOption) error {
	o := listOptions(opts)
	var copts []client.ListOption
	if o.Namespace != "" {
		copts = append(copts, client.InNamespace(o.Namespace))
	}
	if len(o.Fields) > 0 {
		copts = append(copts, client.MatchingFields(o.Fields))
	}
	if o.NoCopy {
		copts = append(copts, client.UnsafeDisableDeepCopy)
	}
	return r.c.List(ctx, list, copts...)
}

// clusterIndexer registers addIndexes' field indexes with the manager's cache.
type clusterIndexer struct{ fi client.FieldIndexer }

func (i clusterIndexer) IndexField(ctx context.Context, obj Object, field string, fn IndexerFunc) error {
	return i.fi.IndexField(ctx, obj, field, func(o client.Object) []string { return fn(o) })
}
