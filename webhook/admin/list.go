package admin

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/store"
)

// Lists and resource versions (docs/admin.md#lists-and-watches,
// docs/decisions/0069-admin-api-list-and-watch-by-hand.md).
//
// A list without limit is the whole collection, read from the store in pages of
// store.MaxPage and written out as it is read, so a client that does not page sees everything
// and the server never holds the collection in memory. With limit, one page and a continue
// token; the token is this server's own (base64url JSON naming the resource, the keyset
// position and the list's resourceVersion) and is checked before use.
//
// Resource versions: an audit record's is its id, and an audit list's the store's newest id
// when the list began (ids only grow). The other resources are views computed from several
// tables, with no version of their own: an object's resourceVersion is a digest of its
// content, and a list's is the sum of its objects' digests with their names, so any replica
// computes the same version for the same state, and a watch can tell, from a version alone,
// whether the state it would start from is still the state the client saw.

// listPageWrite is how long writing one page of a list may take.
const listPageWrite = time.Minute

// continueToken is what a continue parameter carries.
type continueToken struct {
	Resource string   `json:"r"`
	Key      []string `json:"k"`
	Version  string   `json:"v,omitempty"`
}

func encodeContinue(t continueToken) string {
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(res, s string) (continueToken, *apiError) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.Resource != res || len(t.Key) == 0 {
		return continueToken{}, badRequest("continue: not a token this server handed out for " + res)
	}
	return t, nil
}

// walk reads res's listing in sc from sc.after, filtered by sc's selectors, and hands each
// page to fn. With limit > 0 it reads one page of at most limit rows and returns the key to
// continue after (nil when nothing follows); with limit 0 it reads to the end.
func (s *Server) walk(ctx context.Context, res *resource, sc *scope, limit int, fn func([]item) error) ([]string, error) {
	page := *sc
	page.limit = limit
	if limit <= 0 || limit > store.MaxPage {
		page.limit = store.MaxPage
	}
	for {
		items, next, err := res.list(ctx, &page)
		if err != nil {
			return nil, err
		}
		kept := items[:0]
		for _, it := range items {
			if sc.labels.Matches(labels.Set(it.meta.Labels)) && sc.fields.Matches(it.fields) {
				kept = append(kept, it)
			}
		}
		if err := fn(kept); err != nil {
			return nil, err
		}
		if next == nil || limit > 0 {
			return next, nil
		}
		page.after = next
	}
}

// versioned reports whether res's objects carry versions of their own (audit records' ids)
// rather than content digests.
func versioned(res *resource) bool { return res.name == adminv1.ResourceAuditRecords }

// digest is an object's content digest: its JSON without a resourceVersion, with its name.
func digest(it item) uint64 {
	b, _ := json.Marshal(it.obj)
	h := sha256.New()
	h.Write([]byte(it.meta.Namespace + "/" + it.meta.Name + "\x00"))
	h.Write(b)
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

// listVersion formats a view's version: the sum of its objects' digests ("0" is reserved for
// "any version", so a sum of 0 is written as 1).
func listVersion(sum uint64) string {
	if sum == 0 {
		sum = 1
	}
	return strconv.FormatUint(sum, 10)
}

// setVersion sets an item's resourceVersion in the object and in its metadata.
func setVersion(it item, rv string) {
	if o, ok := it.obj.(metav1.Object); ok {
		o.SetResourceVersion(rv)
	}
	it.meta.ResourceVersion = rv
}

// stamp gives a page's objects their resourceVersions and returns the sum of their digests.
func stamp(res *resource, items []item) uint64 {
	var sum uint64
	for _, it := range items {
		if versioned(res) {
			setVersion(it, it.meta.Name)
			continue
		}
		d := digest(it)
		sum += d
		setVersion(it, strconv.FormatUint(d, 10))
	}
	return sum
}

// currentVersion is the version of res's whole listing in sc as it is now.
func (s *Server) currentVersion(ctx context.Context, res *resource, sc *scope) (string, error) {
	if versioned(res) {
		_, last, err := s.o.Store.AuditBounds(ctx)
		return strconv.FormatInt(last, 10), err
	}
	whole := *sc
	whole.after = nil
	var sum uint64
	_, err := s.walk(ctx, res, &whole, 0, func(items []item) error {
		sum += stamp(res, items)
		return nil
	})
	return listVersion(sum), err
}

// list answers a list request: the whole collection, or with limit one page of it.
func (s *Server) list(w http.ResponseWriter, r *http.Request, res *resource, sc *scope) {
	ctx := r.Context()
	q := r.URL.Query()
	rv, match := q.Get("resourceVersion"), q.Get("resourceVersionMatch")
	switch match {
	case "", string(metav1.ResourceVersionMatchNotOlderThan), string(metav1.ResourceVersionMatchExact):
	default:
		writeStatus(w, r, badRequest("resourceVersionMatch must be NotOlderThan or Exact"))
		return
	}
	if match != "" && (rv == "" || sc.token != nil) {
		writeStatus(w, r, badRequest("resourceVersionMatch needs a resourceVersion and no continue token"))
		return
	}
	// The list's version: for a continued list, the one its first page had; for a view
	// listed whole, the sum of what is written (known at the end); otherwise read first.
	version := ""
	if sc.token != nil {
		version = sc.token.Version
		if versioned(res) {
			// Records between the pages already read and this one were deleted by retention:
			// the list the client is putting together can no longer be whole.
			first, _, err := s.o.Store.AuditBounds(ctx)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			if after, _ := strconv.ParseInt(sc.after[0], 10, 64); first > 0 && after < first-1 {
				writeStatus(w, r, expired("the continue token is too old: audit records after it were deleted by retention; list again"))
				return
			}
		}
	} else if versioned(res) || sc.limit > 0 || match == string(metav1.ResourceVersionMatchExact) {
		v, err := s.currentVersion(ctx, res, sc)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		version = v
	}
	if match == string(metav1.ResourceVersionMatchExact) && rv != version {
		writeStatus(w, r, expired("the list is no longer at resourceVersion "+rv+"; list without one"))
		return
	}

	lw := newListWriter(w, r, res)
	var sum uint64
	next, err := s.walk(ctx, res, sc, sc.limit, func(items []item) error {
		sum += stamp(res, items)
		return lw.add(items)
	})
	if err != nil {
		if !lw.started {
			s.fail(w, r, err)
			return
		}
		// Part of the list is out: end the response so the client sees a broken stream,
		// not a short list.
		s.o.Logger.Error(err, "admin API list failed part-way", "path", r.URL.Path)
		panic(http.ErrAbortHandler)
	}
	if version == "" {
		version = listVersion(sum)
	}
	lm := metav1.ListMeta{ResourceVersion: version}
	if next != nil {
		lm.Continue = encodeContinue(continueToken{Resource: res.name, Key: next, Version: version})
	}
	lw.end(lm)
}

// listWriter writes a list (or a Table) item by item: {"kind":…,"items":[…],"metadata":{…}}.
// The metadata comes last, when the list's version is known; JSON objects are unordered.
type listWriter struct {
	w       http.ResponseWriter
	r       *http.Request
	res     *resource
	table   bool
	started bool
	n       int
}

func newListWriter(w http.ResponseWriter, r *http.Request, res *resource) *listWriter {
	return &listWriter{w: w, r: r, res: res, table: wantsTable(r.Header.Get("Accept"))}
}

func (lw *listWriter) start() {
	if lw.started {
		return
	}
	lw.started = true
	lw.w.Header().Set("Content-Type", "application/json")
	lw.w.Header().Set("X-Content-Type-Options", "nosniff")
	lw.w.WriteHeader(http.StatusOK)
	if lw.table {
		cols, _ := json.Marshal(lw.res.columns)
		_, _ = lw.w.Write([]byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","columnDefinitions":` + string(cols) + `,"rows":[`))
		return
	}
	//nolint:gosec // the kind and group are this package's constants, not request input
	_, _ = lw.w.Write([]byte(`{"kind":"` + lw.res.kind + `List","apiVersion":"` + adminv1.GroupVersion + `","items":[`))
}

func (lw *listWriter) add(items []item) error {
	lw.start()
	// A whole list can take longer to write than the listener's write timeout allows one
	// request; each page gets that long again.
	_ = http.NewResponseController(lw.w).SetWriteDeadline(time.Now().Add(listPageWrite))
	for _, it := range items {
		var b []byte
		if lw.table {
			b, _ = json.Marshal(tableRow(lw.r, it))
		} else {
			b, _ = json.Marshal(it.obj)
		}
		if lw.n > 0 {
			_, _ = lw.w.Write([]byte(","))
		}
		if _, err := lw.w.Write(b); err != nil {
			return err
		}
		lw.n++
	}
	return nil
}

func (lw *listWriter) end(lm metav1.ListMeta) {
	lw.start()
	b, _ := json.Marshal(lm)
	_, _ = lw.w.Write([]byte(`],"metadata":` + string(b) + "}\n"))
}

// tableRow is an item as a Table row, with the object or its metadata as includeObject asks.
func tableRow(r *http.Request, it item) metav1.TableRow {
	row := metav1.TableRow{Cells: it.cells}
	switch r.URL.Query().Get("includeObject") {
	case "None":
	case "Object":
		row.Object.Raw, _ = json.Marshal(it.obj)
	default:
		row.Object.Raw, _ = json.Marshal(&metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
			ObjectMeta: *it.meta,
		})
	}
	return row
}
