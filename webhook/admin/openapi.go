package admin

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"reflect"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
)

// The admin API's OpenAPI documents, so that `kubectl explain people.admin.latchkey.dev`
// works: /openapi/v3 (the discovery document the kube-apiserver's aggregator reads),
// /openapi/v3/apis/admin.latchkey.dev/v1alpha1 (the group's document, which the aggregator
// serves to kubectl) and /openapi/v2 (merged into the kube-apiserver's own for older clients).
//
// The schemas are made from the Go types by reflection, and their descriptions are the
// types' doc comments, read from the package's embedded source (adminv1.Source): neither
// can drift from what the server encodes.

const (
	openAPIGroupPath = "apis/" + adminv1.Group + "/" + adminv1.Version
	schemaPrefix     = "dev.latchkey.admin." + adminv1.Version + "."
	objectMetaName   = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
	listMetaName     = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
)

// servedKinds are the kinds the API serves, each with its list.
var servedKinds = []struct{ obj, list any }{
	{adminv1.Person{}, adminv1.PersonList{}},
	{adminv1.Grant{}, adminv1.GrantList{}},
	{adminv1.Connection{}, adminv1.ConnectionList{}},
	{adminv1.Passkey{}, adminv1.PasskeyList{}},
	{adminv1.Link{}, adminv1.LinkList{}},
	{adminv1.ClientTokens{}, adminv1.ClientTokensList{}},
	{adminv1.AuditRecord{}, adminv1.AuditRecordList{}},
	{adminv1.SharedConnection{}, adminv1.SharedConnectionList{}},
}

type openAPIDocs struct {
	v3, v2 []byte
	hash   string
}

var (
	openAPIOnce sync.Once
	openAPI     openAPIDocs
	errOpenAPI  error
)

func loadOpenAPI(resources []resource) (openAPIDocs, error) {
	openAPIOnce.Do(func() {
		docs, err := typeDocs()
		if err != nil {
			errOpenAPI = err
			return
		}
		v3 := schemas(docs, "#/components/schemas/")
		openAPI.v3, _ = json.Marshal(map[string]any{
			"openapi":    "3.0.0",
			"info":       map[string]any{"title": "Latchkey admin API", "version": adminv1.Version},
			"paths":      paths(resources, "#/components/schemas/", true),
			"components": map[string]any{"schemas": v3},
		})
		sum := sha512.Sum512(openAPI.v3)
		openAPI.hash = strings.ToUpper(fmt.Sprintf("%x", sum))
		openAPI.v2, _ = json.Marshal(map[string]any{
			"swagger":     "2.0",
			"info":        map[string]any{"title": "Latchkey admin API", "version": adminv1.Version},
			"paths":       paths(resources, "#/definitions/", false),
			"definitions": schemas(docs, "#/definitions/"),
		})
	})
	return openAPI, errOpenAPI
}

func (s *Server) openAPIRoutes() {
	serve := func(pick func(openAPIDocs) []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			d, err := loadOpenAPI(s.resources())
			if err != nil {
				s.fail(w, r, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Etag", `"`+d.hash+`"`)
			_, _ = w.Write(pick(d))
		}
	}
	s.mux.HandleFunc("GET /openapi/v3", serve(func(d openAPIDocs) []byte {
		b, _ := json.Marshal(map[string]any{"paths": map[string]any{
			openAPIGroupPath: map[string]string{"serverRelativeURL": "/openapi/v3/" + openAPIGroupPath + "?hash=" + d.hash},
		}})
		return b
	}))
	s.mux.HandleFunc("GET /openapi/v3/"+openAPIGroupPath, serve(func(d openAPIDocs) []byte { return d.v3 }))
	s.mux.HandleFunc("GET /openapi/v2", serve(func(d openAPIDocs) []byte { return d.v2 }))
}

// paths describes each resource's operations, each naming its group, version and kind:
// kubectl explain finds a resource's kind through the GET operation of its path.
func paths(resources []resource, ref string, v3 bool) map[string]any {
	out := map[string]any{}
	for _, res := range resources {
		gvk := map[string]string{"group": adminv1.Group, "version": adminv1.Version, "kind": res.kind}
		op := func(action, schema string) map[string]any {
			ok := map[string]any{"description": "OK"}
			if v3 {
				ok["content"] = map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": ref + schema}}}
			} else {
				ok["schema"] = map[string]any{"$ref": ref + schema}
			}
			return map[string]any{
				"operationId":                     action + res.kind,
				"x-kubernetes-action":             action,
				"x-kubernetes-group-version-kind": gvk,
				"responses":                       map[string]any{"200": ok},
			}
		}
		list := map[string]any{"get": op("list", schemaPrefix+res.kind+"List")}
		out["/"+openAPIGroupPath+"/"+res.name] = list
		out["/"+openAPIGroupPath+"/namespaces/{namespace}/"+res.name] = list
		if res.get != nil {
			out["/"+openAPIGroupPath+"/namespaces/{namespace}/"+res.name+"/{name}"] = map[string]any{"get": op("get", schemaPrefix+res.kind)}
		}
	}
	return out
}

// goDocs are the doc comments of a type and of its fields, by Go name.
type goDocs struct {
	doc    string
	fields map[string]string
}

// typeDocs reads the doc comments of adminv1's types from its embedded source.
func typeDocs() (map[string]goDocs, error) {
	out := map[string]goDocs{}
	fset := token.NewFileSet()
	err := fs.WalkDir(adminv1.Source, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		src, err := fs.ReadFile(adminv1.Source, path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				gdoc := goDocs{doc: clean(doc.Text()), fields: map[string]string{}}
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, f := range st.Fields.List {
						for _, n := range f.Names {
							gdoc.fields[n.Name] = clean(f.Doc.Text())
						}
					}
				}
				out[ts.Name.Name] = gdoc
			}
		}
		return nil
	})
	return out, err
}

// clean joins a doc comment's lines into paragraphs, as kubectl explain wraps them itself.
func clean(s string) string {
	paras := strings.Split(strings.TrimSpace(s), "\n\n")
	for i, p := range paras {
		paras[i] = strings.Join(strings.Fields(p), " ")
	}
	return strings.Join(paras, "\n\n")
}

// schemas returns every served kind's schema, its list's and the metadata's, with references
// starting with ref.
func schemas(docs map[string]goDocs, ref string) map[string]any {
	out := map[string]any{
		objectMetaName: objectMetaSchema(),
		listMetaName:   listMetaSchema(),
	}
	for _, k := range servedKinds {
		for _, v := range []any{k.obj, k.list} {
			t := reflect.TypeOf(v)
			sch := structSchema(t, docs, ref)
			sch["x-kubernetes-group-version-kind"] = []map[string]string{{"group": adminv1.Group, "version": adminv1.Version, "kind": t.Name()}}
			if d := docs[t.Name()].doc; d != "" {
				sch["description"] = d
			} else if strings.HasSuffix(t.Name(), "List") {
				sch["description"] = t.Name() + " is a list of " + strings.TrimSuffix(t.Name(), "List") + "."
			}
			out[schemaPrefix+t.Name()] = sch
		}
	}
	return out
}

var (
	timeType       = reflect.TypeFor[metav1.Time]()
	objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()
	listMetaType   = reflect.TypeFor[metav1.ListMeta]()
	typeMetaType   = reflect.TypeFor[metav1.TypeMeta]()
)

func structSchema(t reflect.Type, docs map[string]goDocs, ref string) map[string]any {
	props := map[string]any{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type == typeMetaType {
			props["kind"] = map[string]any{"type": "string", "description": "Kind is the object's kind."}
			props["apiVersion"] = map[string]any{"type": "string", "description": "APIVersion is " + adminv1.GroupVersion + "."}
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		sch := fieldSchema(f.Type, docs, ref)
		if d := docs[t.Name()].fields[f.Name]; d != "" {
			sch["description"] = d
		}
		props[name] = sch
	}
	return map[string]any{"type": "object", "properties": props}
}

func fieldSchema(t reflect.Type, docs map[string]goDocs, ref string) map[string]any {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case objectMetaType:
		return map[string]any{"allOf": []any{map[string]any{"$ref": ref + objectMetaName}}, "default": map[string]any{}}
	case listMetaType:
		return map[string]any{"allOf": []any{map[string]any{"$ref": ref + listMetaName}}, "default": map[string]any{}}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Int, reflect.Int32:
		return map[string]any{"type": "integer", "format": "int32"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return map[string]any{"type": "array", "items": map[string]any{"allOf": []any{map[string]any{"$ref": ref + schemaPrefix + t.Elem().Name()}}, "default": map[string]any{}}}
		}
		return map[string]any{"type": "array", "items": fieldSchema(t.Elem(), docs, ref)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": fieldSchema(t.Elem(), docs, ref)}
	case reflect.Struct:
		return structSchema(t, docs, ref)
	}
	panic("admin: no OpenAPI schema for " + t.String())
}

func str(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }

// objectMetaSchema is the part of metav1.ObjectMeta this API fills in.
func objectMetaSchema() map[string]any {
	return map[string]any{"type": "object", "description": "ObjectMeta is the metadata every object carries.",
		"properties": map[string]any{
			"name":              str("Name identifies the object within its namespace (each kind says what it is)."),
			"namespace":         str("Namespace is the namespace of the object's Project."),
			"uid":               str("UID is derived from what identifies the object, so it is the same on every replica; a Person's changes when their access is ended."),
			"resourceVersion":   str("ResourceVersion is opaque: an audit record's id, or a digest of any other object's content (docs/admin.md#lists-and-watches)."),
			"creationTimestamp": map[string]any{"type": "string", "format": "date-time", "description": "CreationTimestamp is when the object came to be, where Latchkey records it."},
			"labels": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"},
				"description": "Labels: latchkey.dev/project names the Project, latchkey.dev/person the person the object belongs to."},
		}}
}

func listMetaSchema() map[string]any {
	return map[string]any{"type": "object", "description": "ListMeta describes a list.",
		"properties": map[string]any{
			"resourceVersion": str("ResourceVersion is the list's version, from which a watch can start (docs/admin.md#lists-and-watches)."),
			"continue":        str("Continue is set when the list was asked for with limit and more objects follow: pass it as continue to read the next page."),
		}}
}
