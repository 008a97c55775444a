package admin_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
)

// fill sets every field of v (a pointer) to a non-zero value, so that JSON encodes them all.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		switch v.Type() {
		case reflect.TypeFor[metav1.Time]():
			v.Set(reflect.ValueOf(metav1.NewTime(time.Unix(1, 0))))
			return
		case reflect.TypeFor[metav1.ObjectMeta](), reflect.TypeFor[metav1.ListMeta]():
			v.FieldByName("ResourceVersion").SetString("1") // metav1's own schema: not reflected here
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf("v"))
	}
}

// TestOpenAPI: the discovery document points at the group's document, which describes every
// kind the API serves under its group, version and kind (what kubectl explain looks up), with
// a property for every field an object encodes and the types' own documentation.
func TestOpenAPI(t *testing.T) {
	h := newHarness(t)
	var disc struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if code := h.do("GET", "/openapi/v3", "", &disc); code != 200 {
		t.Fatalf("/openapi/v3: %d", code)
	}
	url := disc.Paths["apis/admin.latchkey.dev/v1alpha1"].ServerRelativeURL
	if !strings.HasPrefix(url, "/openapi/v3/apis/admin.latchkey.dev/v1alpha1?hash=") {
		t.Fatalf("discovery: %+v", disc)
	}
	type schema struct {
		Description string            `json:"description"`
		Properties  map[string]schema `json:"properties"`
		GVK         []struct {
			Group, Version, Kind string
		} `json:"x-kubernetes-group-version-kind"`
	}
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if code := h.do("GET", url, "", &doc); code != 200 {
		t.Fatalf("group document: %d", code)
	}
	for _, v := range []any{&adminv1.Person{}, &adminv1.Grant{}, &adminv1.Connection{}, &adminv1.Passkey{}, &adminv1.Link{},
		&adminv1.ClientTokens{}, &adminv1.AuditRecord{}, &adminv1.SharedConnection{}, &adminv1.ConnectionList{}} {
		kind := reflect.TypeOf(v).Elem().Name()
		t.Run(kind, func(t *testing.T) {
			sch, ok := doc.Components.Schemas["dev.latchkey.admin.v1alpha1."+kind]
			if !ok || len(sch.GVK) != 1 || sch.GVK[0].Group != adminv1.Group || sch.GVK[0].Version != adminv1.Version || sch.GVK[0].Kind != kind {
				t.Fatalf("schema: %v %+v", ok, sch.GVK)
			}
			if sch.Description == "" {
				t.Error("no description")
			}
			fill(reflect.ValueOf(v).Elem())
			b, _ := json.Marshal(v)
			var fields map[string]any
			must(t, json.Unmarshal(b, &fields))
			for f := range fields {
				if _, ok := sch.Properties[f]; !ok {
					t.Errorf("field %q is encoded but not in the schema (has %v)", f, slices.Sorted(func(yield func(string) bool) {
						for k := range sch.Properties {
							if !yield(k) {
								return
							}
						}
					}))
				}
			}
		})
	}
	// kubectl explain finds a resource's kind through its path's GET operation.
	var withPaths struct {
		Paths map[string]struct {
			Get struct {
				GVK struct{ Group, Version, Kind string } `json:"x-kubernetes-group-version-kind"`
			} `json:"get"`
		} `json:"paths"`
	}
	h.do("GET", url, "", &withPaths)
	for res, kind := range map[string]string{"connections": "Connection", "auditrecords": "AuditRecord", "people": "Person"} {
		gvk := withPaths.Paths["/apis/admin.latchkey.dev/v1alpha1/namespaces/{namespace}/"+res].Get.GVK
		if gvk.Group != adminv1.Group || gvk.Version != adminv1.Version || gvk.Kind != kind {
			t.Errorf("the path of %s names %+v", res, gvk)
		}
	}
	state := doc.Components.Schemas["dev.latchkey.admin.v1alpha1.Connection"].Properties["state"]
	if !strings.Contains(state.Description, "needs_reconnect") || strings.Contains(state.Description, "\n") {
		t.Errorf("Connection.state's description is not its doc comment, joined: %q", state.Description)
	}
	var v2 struct {
		Swagger     string            `json:"swagger"`
		Definitions map[string]schema `json:"definitions"`
	}
	if code := h.do("GET", "/openapi/v2", "", &v2); code != 200 || v2.Swagger != "2.0" || len(v2.Definitions["dev.latchkey.admin.v1alpha1.Person"].GVK) != 1 {
		t.Fatalf("/openapi/v2: %d %s", code, v2.Swagger)
	}
}
