package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// memReader is a client.Reader over a fixed set of objects, with the same field indexes as the
// manager's cache (addIndexes registers them here too), so the resolver and the compiler read it
// exactly as they read the cache. It serves what they ask: Get by key, and List of one kind,
// optionally in one namespace and matching one or more indexed fields. It never copies: like
// the cache read with noCopy, callers must not modify what they get.
type memReader struct {
	objects map[reflect.Type]map[types.NamespacedName]client.Object
	indexes map[reflect.Type]map[string]client.IndexerFunc
}

func newMemReader() *memReader {
	return &memReader{
		objects: map[reflect.Type]map[types.NamespacedName]client.Object{},
		indexes: map[reflect.Type]map[string]client.IndexerFunc{},
	}
}

// add holds obj; a later object with the same kind and key replaces it.
func (m *memReader) add(obj client.Object) {
	t := reflect.TypeOf(obj)
	if m.objects[t] == nil {
		m.objects[t] = map[types.NamespacedName]client.Object{}
	}
	m.objects[t][client.ObjectKeyFromObject(obj)] = obj
}

// IndexField implements client.FieldIndexer.
func (m *memReader) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	t := reflect.TypeOf(obj)
	if m.indexes[t] == nil {
		m.indexes[t] = map[string]client.IndexerFunc{}
	}
	m.indexes[t][field] = fn
	return nil
}

// Get implements client.Reader.
func (m *memReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	src, ok := m.objects[reflect.TypeOf(obj)][key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: reflect.TypeOf(obj).Elem().Name()}, key.Name)
	}
	// A shallow copy, as the cache's noCopy reads share the cached object's maps and slices.
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(src).Elem())
	return nil
}

// List implements client.Reader for lists with an Items slice of values (every Kubernetes list
// type), sorted by namespace and name.
func (m *memReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	if lo.LabelSelector != nil && !lo.LabelSelector.Empty() {
		return errors.New("memReader: label selectors are not supported")
	}
	items := reflect.ValueOf(list).Elem().FieldByName("Items")
	if !items.IsValid() || items.Kind() != reflect.Slice {
		return fmt.Errorf("memReader: %T has no Items", list)
	}
	t := reflect.PointerTo(items.Type().Elem())
	var out []client.Object
	for _, obj := range m.objects[t] {
		if lo.Namespace != "" && obj.GetNamespace() != lo.Namespace {
			continue
		}
		ok, err := m.matches(t, obj, lo)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, obj)
		}
	}
	slices.SortFunc(out, func(a, b client.Object) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	v := reflect.MakeSlice(items.Type(), len(out), len(out))
	for i, obj := range out {
		v.Index(i).Set(reflect.ValueOf(obj).Elem())
	}
	items.Set(v)
	return nil
}

// matches applies a field selector of exact matches on indexed fields, as the cache does.
func (m *memReader) matches(t reflect.Type, obj client.Object, lo client.ListOptions) (bool, error) {
	if lo.FieldSelector == nil || lo.FieldSelector.Empty() {
		return true, nil
	}
	for _, req := range lo.FieldSelector.Requirements() {
		fn, ok := m.indexes[t][req.Field]
		if !ok {
			return false, fmt.Errorf("memReader: no index %q for %s", req.Field, t.Elem().Name())
		}
		if !slices.Contains(fn(obj), req.Value) {
			return false, nil
		}
	}
	return true, nil
}

var _ client.Reader = (*memReader)(nil)

// readOnlyClient lets the reconcilers' status phases, which read through base.client, run on a
// memReader. Nothing in those phases writes; a write would reach the nil Client and panic,
// which would be a programming error here, never a user's.
type readOnlyClient struct {
	client.Client
	r *memReader
}

func (c readOnlyClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.r.Get(ctx, key, obj, opts...)
}

func (c readOnlyClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.r.List(ctx, list, opts...)
}

func (c readOnlyClient) Scheme() *runtime.Scheme { return standaloneScheme }
