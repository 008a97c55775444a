package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
)

// Watches (docs/admin.md#lists-and-watches, docs/decisions/0069). The state lives in SQL,
// written by every replica, with no change feed: a watch reads the store every WatchPoll and
// sends what changed, so a client holds one request open instead of listing again and again,
// and a change made through any replica reaches every watch.
//
// An audit watch reads the records after the last one it has seen (cheap: the primary key).
// A watch of any other resource lists its whole scope on every poll and sends the difference
// (ADDED, MODIFIED, DELETED), each event's object carrying the version of the listing after
// it, so a client that resumes from an event or a bookmark resumes from a state the server
// can recognise.

const (
	defaultWatchPoll     = 2 * time.Second
	defaultWatchBookmark = time.Minute
	// defaultWatchTimeout ends a watch that asked for no timeoutSeconds, and caps one that
	// asked for more: the client watches again from where it was, as from the kube-apiserver.
	defaultWatchTimeout = 30 * time.Minute
)

type event struct {
	typ string
	it  item
}

// stream is one watch's view of a resource.
type stream interface {
	// begin loads the state the watch starts from: from resourceVersion rv, or, with initial,
	// from nothing, returning ADDED events for everything there is.
	begin(ctx context.Context, rv string, initial bool) ([]event, error)
	// poll reads the store again and returns what changed since the last read.
	poll(ctx context.Context) ([]event, error)
	// version is where the watch stands, for a bookmark.
	version() string
}

// watchParams reads a watch's parameters as the kube-apiserver validates them.
func (s *Server) watchParams(r *http.Request, sc *scope) (rv string, initial, bookmarks bool, timeout time.Duration, _ *apiError) {
	q := r.URL.Query()
	rv, match := q.Get("resourceVersion"), q.Get("resourceVersionMatch")
	initial, bookmarks = q.Get("sendInitialEvents") == "true", q.Get("allowWatchBookmarks") == "true"
	switch {
	case sc.token != nil:
		return "", false, false, 0, badRequest("continue is not allowed on a watch")
	case initial && match != string(metav1.ResourceVersionMatchNotOlderThan):
		return "", false, false, 0, badRequest("sendInitialEvents needs resourceVersionMatch=NotOlderThan")
	case initial && !bookmarks:
		return "", false, false, 0, badRequest("sendInitialEvents needs allowWatchBookmarks=true")
	case !initial && match != "":
		return "", false, false, 0, badRequest("resourceVersionMatch is not allowed on a watch without sendInitialEvents=true")
	}
	timeout = s.o.WatchTimeout
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return "", false, false, 0, badRequest("timeoutSeconds must be a number of seconds, not " + strconv.Quote(v))
		}
		if n > 0 && time.Duration(n)*time.Second < timeout {
			timeout = time.Duration(n) * time.Second
		}
	}
	return rv, initial, bookmarks, timeout, nil
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request, res *resource, sc *scope) {
	rv, initial, bookmarks, timeout, perr := s.watchParams(r, sc)
	if perr != nil {
		writeStatus(w, r, perr)
		return
	}
	// The listener's read and write timeouts bound ordinary requests (a minute); a watch lasts
	// until its own timeout, and a client that stops reading still cannot hold it past that.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(timeout + time.Minute))
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()

	var st stream
	if versioned(res) {
		st = &auditStream{s: s, res: res, sc: sc}
	} else {
		st = &viewStream{s: s, res: res, sc: sc}
	}
	// "" and "0" start from the current state, sent as ADDED events (as the kube-apiserver
	// does); a version starts after it.
	evs, err := st.begin(ctx, rv, initial || rv == "" || rv == "0")
	var ae *apiError
	if err != nil && (!errors.As(err, &ae) || ae.code != http.StatusGone) {
		s.fail(w, r, err)
		return
	}
	ww := &watchWriter{w: w, r: r, res: res, rc: rc, table: wantsTable(r.Header.Get("Accept"))}
	ww.w.Header().Set("Content-Type", "application/json")
	ww.w.Header().Set("X-Content-Type-Options", "nosniff")
	ww.w.WriteHeader(http.StatusOK)
	if ae != nil {
		// As the kube-apiserver answers a watch from a version it no longer has: an ERROR
		// event with a 410 Status, on which client-go lists again.
		_ = ww.status(ae)
		return
	}
	if ww.send(evs) != nil {
		return
	}
	if initial {
		if ww.bookmark(st.version(), true) != nil {
			return
		}
	}
	if err := ww.rc.Flush(); err != nil {
		return
	}

	poll := time.NewTicker(s.o.WatchPoll)
	defer poll.Stop()
	var marks <-chan time.Time
	if bookmarks {
		t := time.NewTicker(s.o.WatchBookmark)
		defer t.Stop()
		marks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-marks:
			if ww.bookmark(st.version(), false) != nil {
				return
			}
		case <-poll.C:
			evs, err := st.poll(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.o.Logger.Error(err, "admin API watch failed", "path", r.URL.Path)
				_ = ww.status(errInternal)
				return
			}
			if ww.send(evs) != nil {
				return
			}
		}
	}
}

// watchWriter writes watch events, one JSON object a line, flushing after each batch.
type watchWriter struct {
	w       http.ResponseWriter
	r       *http.Request
	res     *resource
	rc      *http.ResponseController
	table   bool
	headers bool // a Table's column definitions went out with the first row
}

func (ww *watchWriter) write(typ string, obj any) error {
	b, err := json.Marshal(struct {
		Type   string `json:"type"`
		Object any    `json:"object"`
	}{typ, obj})
	if err != nil {
		return err
	}
	if _, err := ww.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return nil
}

func (ww *watchWriter) send(evs []event) error {
	for _, e := range evs {
		obj := e.it.obj
		if ww.table {
			// As the kube-apiserver does for kubectl get --watch: a Table of one row, the
			// column definitions with the first only.
			t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: e.it.meta.ResourceVersion},
				Rows:     []metav1.TableRow{tableRow(ww.r, e.it)}}
			if !ww.headers {
				t.ColumnDefinitions, ww.headers = ww.res.columns, true
			}
			obj = t
		}
		if err := ww.write(e.typ, obj); err != nil {
			return err
		}
	}
	if len(evs) == 0 {
		return nil
	}
	return ww.rc.Flush()
}

// bookmark tells the client where the watch stands; end marks the end of the initial events
// of a watch that asked for them (client-go's streaming list).
func (ww *watchWriter) bookmark(rv string, end bool) error {
	m := metav1.ObjectMeta{ResourceVersion: rv}
	if end {
		m.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	if err := ww.write("BOOKMARK", struct {
		metav1.TypeMeta `json:",inline"`
		Meta            metav1.ObjectMeta `json:"metadata"`
	}{metav1.TypeMeta{Kind: ww.res.kind, APIVersion: adminv1.GroupVersion}, m}); err != nil {
		return err
	}
	return ww.rc.Flush()
}

func (ww *watchWriter) status(e *apiError) error {
	if err := ww.write("ERROR", &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: e.message, Reason: e.reason, Details: e.details,
		Code: int32(e.code), //nolint:gosec // an HTTP status code
	}); err != nil {
		return err
	}
	return ww.rc.Flush()
}

// ---------------------------------------------------------------------------------------------
// views: the whole scope, compared

type viewEntry struct {
	digest uint64
	it     item
}

type viewStream struct {
	s     *Server
	res   *resource
	sc    *scope
	state map[string]viewEntry
	sum   uint64
}

func (v *viewStream) read(ctx context.Context) (map[string]viewEntry, []string, error) {
	cur := map[string]viewEntry{}
	whole := *v.sc
	whole.after = nil
	_, err := v.s.walk(ctx, v.res, &whole, 0, func(items []item) error {
		for _, it := range items {
			cur[it.meta.Namespace+"/"+it.meta.Name] = viewEntry{digest(it), it}
		}
		return nil
	})
	keys := make([]string, 0, len(cur))
	for k := range cur {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return cur, keys, err
}

func (v *viewStream) begin(ctx context.Context, rv string, initial bool) ([]event, error) {
	cur, keys, err := v.read(ctx)
	if err != nil {
		return nil, err
	}
	v.state = cur
	var evs []event
	for _, k := range keys {
		e := cur[k]
		v.sum += e.digest
		if initial {
			setVersion(e.it, listVersion(v.sum))
			evs = append(evs, event{"ADDED", e.it})
		}
	}
	if !initial && rv != listVersion(v.sum) {
		return nil, expired("too old resource version: " + v.res.name + " changed since " + rv + "; list again")
	}
	return evs, nil
}

func (v *viewStream) poll(ctx context.Context) ([]event, error) {
	cur, keys, err := v.read(ctx)
	if err != nil {
		return nil, err
	}
	var evs []event
	for _, k := range keys {
		e := cur[k]
		old, had := v.state[k]
		switch {
		case !had:
			v.sum += e.digest
			setVersion(e.it, listVersion(v.sum))
			evs = append(evs, event{"ADDED", e.it})
		case old.digest != e.digest:
			v.sum += e.digest - old.digest
			setVersion(e.it, listVersion(v.sum))
			evs = append(evs, event{"MODIFIED", e.it})
		}
	}
	gone := make([]string, 0)
	for k := range v.state {
		if _, ok := cur[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	for _, k := range gone {
		old := v.state[k]
		v.sum -= old.digest
		setVersion(old.it, listVersion(v.sum))
		evs = append(evs, event{"DELETED", old.it})
	}
	v.state = cur
	return evs, nil
}

func (v *viewStream) version() string { return listVersion(v.sum) }

// ---------------------------------------------------------------------------------------------
// audit records: the log after an id

// auditStream follows the audit log. Ids are handed out when a record is inserted and become
// visible when its transaction commits, so on PostgreSQL a record can appear after one with a
// larger id; each poll therefore reads again from where the log stood one poll earlier
// (floor) and skips the records it has sent, and bookmarks carry the floor, so a watch
// resumed from one sends nothing twice that it could instead have missed.
type auditStream struct {
	s        *Server
	res      *resource
	sc       *scope
	floor    int64
	prevHead int64
	seen     map[int64]bool
}

func (a *auditStream) begin(ctx context.Context, rv string, initial bool) ([]event, error) {
	a.seen = map[int64]bool{}
	first, last, err := a.s.o.Store.AuditBounds(ctx)
	if err != nil {
		return nil, err
	}
	if initial {
		evs, err := a.after(ctx, 0)
		a.floor, a.prevHead = last, last
		return evs, err
	}
	from, perr := strconv.ParseInt(rv, 10, 64)
	if perr != nil || from < 0 {
		return nil, badRequest("resourceVersion: not an audit record version: " + strconv.Quote(rv))
	}
	if first > 0 && from < first-1 {
		return nil, expired("too old resource version: audit records after " + rv + " were deleted by retention; list again")
	}
	a.floor, a.prevHead = from, from
	return nil, nil
}

// after returns ADDED events for the records after id that this watch has not sent.
func (a *auditStream) after(ctx context.Context, id int64) ([]event, error) {
	sc := *a.sc
	sc.after = []string{strconv.FormatInt(id, 10)}
	var evs []event
	_, err := a.s.walk(ctx, a.res, &sc, 0, func(items []item) error {
		stamp(a.res, items)
		for _, it := range items {
			n, _ := strconv.ParseInt(it.meta.Name, 10, 64)
			if !a.seen[n] {
				a.seen[n] = true
				evs = append(evs, event{"ADDED", it})
			}
		}
		return nil
	})
	return evs, err
}

func (a *auditStream) poll(ctx context.Context) ([]event, error) {
	_, head, err := a.s.o.Store.AuditBounds(ctx)
	if err != nil {
		return nil, err
	}
	evs, err := a.after(ctx, a.floor)
	if err != nil {
		return nil, err
	}
	a.floor, a.prevHead = max(a.floor, a.prevHead), max(head, a.floor)
	for n := range a.seen {
		if n <= a.floor {
			delete(a.seen, n)
		}
	}
	return evs, nil
}

func (a *auditStream) version() string { return strconv.FormatInt(a.floor, 10) }
