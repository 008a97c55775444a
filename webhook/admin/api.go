package admin

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
)

const prefix = "/apis/" + adminv1.Group + "/" + adminv1.Version

// item is one object on its way out: the object itself, its metadata, its table cells and the
// fields a field selector may name.
type item struct {
	obj    any
	meta   *metav1.ObjectMeta
	cells  []any
	fields fields.Set
}

// scope is where a request looks: the Projects of its namespace (or of every namespace),
// narrowed by the label selector's latchkey.dev/project, plus the selectors themselves.
type scope struct {
	namespace string // "" for a list across every namespace
	projects  []*config.Project
	labels    labels.Selector
	fields    fields.Selector
	// limit is the page size the client asked for; 0 lists everything.
	limit int
	// after is the keyset position to continue after; token the continue token it came from.
	after []string
	token *continueToken
	// person is the person the selectors pin down (latchkey.dev/person or the person field).
	person string
	raw    url.Values
}

func (sc *scope) keys() []string {
	out := make([]string, len(sc.projects))
	for i, p := range sc.projects {
		out[i] = p.Key
	}
	return out
}

func (sc *scope) project(key string) *config.Project {
	for _, p := range sc.projects {
		if p.Key == key {
			return p
		}
	}
	return nil
}

func (sc *scope) query() store.AdminQuery {
	return store.AdminQuery{Projects: sc.keys(), Subject: sc.person, After: sc.after, Limit: sc.limit}
}

// resource is one kind of object the API serves.
type resource struct {
	name, singular, kind string
	verbs                []string
	columns              []metav1.TableColumnDefinition
	// fields are what a field selector may name besides metadata.name and metadata.namespace.
	fields []string
	// list returns a page and the key to continue after (nil on the last page).
	list func(ctx context.Context, sc *scope) ([]item, []string, error)
	get  func(ctx context.Context, sc *scope, name string) (item, error)
	// del ends what the object stands for (or, with dryRun, only checks that it exists).
	del func(ctx context.Context, sc *scope, name string, dryRun bool) (types.UID, string, error)
	// create answers a POST to the collection (with dryRun, only checks it); nil refuses it.
	create func(ctx context.Context, sc *scope, body []byte, dryRun bool) (item, error)
}

func (s *Server) routes() {
	s.mux.HandleFunc("GET /apis", s.groupList)
	s.mux.HandleFunc("GET /apis/{$}", s.groupList)
	s.mux.HandleFunc("GET /apis/"+adminv1.Group, s.group)
	s.mux.HandleFunc("GET /apis/"+adminv1.Group+"/{$}", s.group)
	s.mux.HandleFunc("GET "+prefix, s.resourceList)
	s.mux.HandleFunc("GET "+prefix+"/{$}", s.resourceList)
	s.mux.HandleFunc(prefix+"/{resource}", s.collection)
	s.mux.HandleFunc(prefix+"/namespaces/{namespace}/{resource}", s.collection)
	s.mux.HandleFunc(prefix+"/namespaces/{namespace}/{resource}/{name}", s.object)
	s.openAPIRoutes()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, r, &apiError{http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource", nil})
	})
}

var groupVersion = metav1.GroupVersionForDiscovery{GroupVersion: adminv1.GroupVersion, Version: adminv1.Version}

func apiGroup() metav1.APIGroup {
	return metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             adminv1.Group,
		Versions:         []metav1.GroupVersionForDiscovery{groupVersion},
		PreferredVersion: groupVersion,
	}
}

func (s *Server) groupList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, &metav1.APIGroupList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups:   []metav1.APIGroup{apiGroup()},
	})
}

func (s *Server) group(w http.ResponseWriter, _ *http.Request) {
	g := apiGroup()
	writeJSON(w, http.StatusOK, &g)
}

func (s *Server) resourceList(w http.ResponseWriter, _ *http.Request) {
	out := &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: adminv1.GroupVersion,
	}
	for _, res := range s.resources() {
		out.APIResources = append(out.APIResources, metav1.APIResource{
			Name: res.name, SingularName: res.singular, Namespaced: true, Kind: res.kind,
			Verbs: res.verbs, Categories: []string{"latchkey"},
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*resource, bool) {
	name := r.PathValue("resource")
	for _, res := range s.resources() {
		if res.name == name {
			return &res, true
		}
	}
	writeStatus(w, r, &apiError{http.StatusNotFound, metav1.StatusReasonNotFound,
		"the server could not find the requested resource " + strconv.Quote(name), nil})
	return nil, false
}

func (s *Server) collection(w http.ResponseWriter, r *http.Request) {
	res, ok := s.lookup(w, r)
	if !ok {
		return
	}
	if r.Method == http.MethodPost && res.create != nil {
		s.create(w, r, res)
		return
	}
	if r.Method != http.MethodGet {
		writeStatus(w, r, notAllowed(r.Method+" is not supported on "+res.name+": delete objects one by one"))
		return
	}
	sc, err := s.scope(r, res)
	if err != nil {
		writeStatus(w, r, err)
		return
	}
	if v := r.URL.Query().Get("watch"); v == "true" || v == "1" {
		s.watch(w, r, res, sc)
		return
	}
	s.list(w, r, res, sc)
}

func (s *Server) object(w http.ResponseWriter, r *http.Request) {
	res, ok := s.lookup(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	sc, err := s.scope(r, res)
	if err != nil {
		writeStatus(w, r, err)
		return
	}
	switch r.Method {
	case http.MethodGet:
		if res.get == nil {
			writeStatus(w, r, notAllowed("get is not supported on "+res.name+"; list them"))
			return
		}
		it, err := res.get(r.Context(), sc, name)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.respond(w, r, res, it)
	case http.MethodDelete:
		if res.del == nil {
			writeStatus(w, r, notAllowed("delete is not supported on "+res.name))
			return
		}
		dryRun, derr := dryRun(r)
		if derr != nil {
			writeStatus(w, r, derr)
			return
		}
		uid, msg, err := res.del(r.Context(), sc, name, dryRun)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, &metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusSuccess,
			Message:  msg,
			Details:  &metav1.StatusDetails{Name: name, Group: adminv1.Group, Kind: res.name, UID: uid},
		})
	default:
		writeStatus(w, r, notAllowed(r.Method+" is not supported: these objects are views of Latchkey's state; delete ends access"))
	}
}

// dryRun reads dryRun from the query or the DeleteOptions body (kubectl --dry-run=server).
func dryRun(r *http.Request) (bool, *apiError) {
	if v := r.URL.Query()["dryRun"]; len(v) > 0 {
		return v[0] == "All", nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return false, badRequest("the request body could not be read")
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return false, nil
	}
	var opts metav1.DeleteOptions
	if err := json.Unmarshal(body, &opts); err != nil {
		return false, badRequest("the request body is not DeleteOptions: " + err.Error())
	}
	return len(opts.DryRun) > 0 && opts.DryRun[0] == "All", nil
}

// fail answers with err's Status, or a 500 for a store failure (logged, never shown).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeStatus(w, r, ae)
		return
	}
	s.o.Logger.Error(err, "admin API request failed", "path", r.URL.Path)
	writeStatus(w, r, errInternal)
}

// scope reads the namespace, selectors, limit and continue token of a request.
func (s *Server) scope(r *http.Request, res *resource) (*scope, *apiError) {
	q := r.URL.Query()
	sc := &scope{namespace: r.PathValue("namespace"), labels: labels.Everything(), fields: fields.Everything(), raw: q}
	if v := q.Get("labelSelector"); v != "" {
		sel, err := labels.Parse(v)
		if err != nil {
			return nil, badRequest("labelSelector: " + err.Error())
		}
		sc.labels = sel
	}
	if v := q.Get("fieldSelector"); v != "" {
		sel, err := fields.ParseSelector(v)
		if err != nil {
			return nil, badRequest("fieldSelector: " + err.Error())
		}
		for _, req := range sel.Requirements() {
			if req.Field != "metadata.name" && req.Field != "metadata.namespace" && !contains(res.fields, req.Field) {
				return nil, badRequest(fmt.Sprintf("fieldSelector: %q is not a field of %s (supported: metadata.name, metadata.namespace%s)",
					req.Field, res.name, strings.Join(append([]string{""}, res.fields...), ", ")))
			}
		}
		sc.fields = sel
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, badRequest("limit must be a number of objects, not " + strconv.Quote(v))
		}
		sc.limit = n
	}
	if v := q.Get("continue"); v != "" {
		t, err := decodeContinue(res.name, v)
		if err != nil {
			return nil, err
		}
		sc.after, sc.token = t.Key, &t
	}

	snap := s.o.Config.Load()
	projectName, pinned := exact(sc.labels, adminv1.ProjectLabel)
	if snap != nil {
		for _, p := range snap.Projects {
			if (sc.namespace == "" || p.Namespace == sc.namespace) && (!pinned || p.Name == projectName) {
				sc.projects = append(sc.projects, p)
			}
		}
	}
	sort.Slice(sc.projects, func(i, j int) bool { return sc.projects[i].Key < sc.projects[j].Key })

	if v, ok := exact(sc.labels, adminv1.PersonLabel); ok {
		sc.person = v
	}
	if v, ok := sc.fields.RequiresExactMatch("person"); ok && contains(res.fields, "person") {
		if sc.person != "" && sc.person != v {
			sc.projects = nil // two different people: nothing matches
		}
		sc.person = v
	}
	return sc, nil
}

// exact returns the one value sel requires key to have, if it requires one.
func exact(sel labels.Selector, key string) (string, bool) {
	reqs, _ := sel.Requirements()
	for _, req := range reqs {
		if req.Key() != key {
			continue
		}
		switch req.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if vals := req.Values(); vals.Len() == 1 {
				return vals.UnsortedList()[0], true
			}
		}
	}
	return "", false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// respond writes one object, or a meta.k8s.io/v1 Table of it when the Accept header asks for
// one, as kubectl get does.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, res *resource, it item) {
	stamp(res, []item{it})
	if wantsTable(r.Header.Get("Accept")) {
		writeJSON(w, http.StatusOK, &metav1.Table{
			TypeMeta:          metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"},
			ColumnDefinitions: res.columns,
			Rows:              []metav1.TableRow{tableRow(r, it)},
		})
		return
	}
	writeJSON(w, http.StatusOK, it.obj)
}

// wantsTable reports whether an Accept header asks for a meta.k8s.io/v1 Table (kubectl get
// sends "application/json;as=Table;v=v1;g=meta.k8s.io,application/json").
func wantsTable(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && mt == "application/json" && params["as"] == "Table" && params["g"] == "meta.k8s.io" && params["v"] == "v1" {
			return true
		}
	}
	return false
}

// uid derives an object's uid from what identifies it, so the same object has the same uid on
// every replica and every request.
func uid(parts ...string) types.UID {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]))
}

// meta is the metadata every object carries.
func meta(p *config.Project, name string, created metav1.Time, person string, id ...string) *metav1.ObjectMeta {
	m := &metav1.ObjectMeta{
		Name:              name,
		Namespace:         p.Namespace,
		UID:               uid(append([]string{p.Key}, id...)...),
		CreationTimestamp: created,
		Labels:            map[string]string{adminv1.ProjectLabel: p.Name},
	}
	if person != "" {
		m.Labels[adminv1.PersonLabel] = person
	}
	return m
}
