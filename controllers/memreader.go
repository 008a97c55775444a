package controllers

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// memReader is a Reader over a fixed set of objects, with the same field indexes as the
// manager's cache (addIndexes registers them here too), so the resolver and the compiler read it
// exactly as they read the cache. It serves what they ask: Get by key, and List of one kind,
// optionally in one namespace and matching one or more indexed fields. It never copies: like
// the cache read with noCopy, callers must not modify what they get.
type memReader struct {
	objects map[reflect.Type]map[types.NamespacedName]Object
	indexes map[reflect.Type]map[string]IndexerFunc
}

func newMemReader() *memReader {
	return &memReader{
		objects: map[reflect.Type]map[types.NamespacedName]Object{},
		indexes: map[reflect.Type]map[string]IndexerFunc{},
	}
}

// add holds obj; a later object with the same kind and key replaces it.
func (m *memReader) add(obj Object) {
	t := reflect.TypeOf(obj)
	if m.objects[t] == nil {
		m.objects[t] = map[types.NamespacedName]Object{}
	}
	m.objects[t][objectKey(obj)] = obj
}

// IndexField implements FieldIndexer.
func (m *memReader) IndexField(_ context.Context, obj Object, field string, fn IndexerFunc) error {
	t := reflect.TypeOf(obj)
	if m.indexes[t] == nil {
		m.indexes[t] = map[string]IndexerFunc{}
	}
	m.indexes[t][field] = fn
	return nil
}

// Get implements Reader.
func (m *memReader) Get(_ context.Context, key types.NamespacedName, obj Object, _ ...GetOption) error {
	src, ok := m.objects[reflect.TypeOf(obj)][key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: reflect.TypeOf(obj).Elem().Name()}, key.Name)
	}
	// A shallow copy, as the cache's noCopy reads share the cached object's maps and slices.
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(src).Elem())
	return nil
}

// List implements Reader for lists with an Items slice of values (every Kubernetes list
// type), sorted by namespace and name.
func (m *memReader) List(_ context.Context, list ObjectList, opts ...ListOption) error {
	lo := listOptions(opts)
	items := reflect.ValueOf(list).Elem().FieldByName("Items")
	if !items.IsValid() || items.Kind() != reflect.Slice {
		return fmt.Errorf("memReader: %T has no Items", list)
	}
	t := reflect.PointerTo(items.Type().Elem())
	var out []Object
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
	slices.SortFunc(out, func(a, b Object) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	v := reflect.MakeSlice(items.Type(), len(out), len(out))
	for i, obj := range out {
		v.Index(i).Set(reflect.ValueOf(obj).Elem())
	}
	items.Set(v)
	return nil
}

// matches applies exact matches on indexed fields, as the cache does.
func (m *memReader) matches(t reflect.Type, obj Object, lo ReadOptions) (bool, error) {
	for field, value := range lo.Fields {
		fn, ok := m.indexes[t][field]
		if !ok {
			return false, fmt.Errorf("memReader: no index %q for %s", field, t.Elem().Name())
		}
		if !slices.Contains(fn(obj), value) {
			return false, nil
		}
	}
	return true, nil
}

var (
	_ Reader       = (*memReader)(nil)
	_ FieldIndexer = (*memReader)(nil)
)
