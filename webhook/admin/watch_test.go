package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/store/sql/pgtest"
)

// TestListWithoutLimitIsWhole: a client that does not page gets every object, across the
// store's own pages, with a resourceVersion; paging with limit reads the same objects.
func TestListWithoutLimitIsWhole(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	must(t, upsert(ctx, h.st, "team-a/demo", "alice", "alice@example.com"))
	const conns = 150 // more than the 100 a list without limit used to stop at
	for i := range conns {
		_, err := h.st.SaveConnection(ctx, store.Connection{ID: fmt.Sprintf("c%03d", i), Project: "team-a/demo", Subject: "alice",
			Connector: "team-a/github", AccountID: fmt.Sprint(i), AccountName: fmt.Sprintf("acct%d", i), KeyID: "k",
			TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
		must(t, err)
	}
	const records = store.MaxPage + 5 // more than one page of the store
	for i := range records {
		must(t, h.st.AppendAudit(ctx, store.AuditRecord{Project: "team-a/demo", Time: now, Actor: "alice", Action: "a" + strconv.Itoa(i%3)}))
	}

	var l adminv1.ConnectionList
	if code := h.do("GET", base+"/namespaces/team-a/connections", "", &l); code != 200 || len(l.Items) != conns || l.Continue != "" || l.ResourceVersion == "" {
		t.Fatalf("unpaged connections: %d, %d items, continue %q, rv %q", code, len(l.Items), l.Continue, l.ResourceVersion)
	}
	var table metav1.Table
	if code := h.do("GET", base+"/namespaces/team-a/connections", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json", &table); code != 200 || len(table.Rows) != conns {
		t.Fatalf("unpaged table: %d, %d rows", code, len(table.Rows))
	}
	var audit adminv1.AuditRecordList
	if code := h.do("GET", base+"/namespaces/team-a/auditrecords", "", &audit); code != 200 || len(audit.Items) != records {
		t.Fatalf("unpaged audit: %d, %d records", code, len(audit.Items))
	}
	if last := audit.Items[len(audit.Items)-1]; audit.ResourceVersion != strconv.FormatInt(last.ID, 10) || last.ResourceVersion != last.Name {
		t.Fatalf("audit versions: list %q, last record %q (id %d)", audit.ResourceVersion, last.ResourceVersion, last.ID)
	}

	// Pages of 100 carry the first page's version and add up to the same list.
	seen, cont := 0, ""
	for pages := 0; ; pages++ {
		var p adminv1.ConnectionList
		code := h.do("GET", base+"/namespaces/team-a/connections?limit=100&continue="+cont, "", &p)
		if code != 200 || len(p.Items) > 100 || pages > 2 || p.ResourceVersion != l.ResourceVersion {
			t.Fatalf("page %d: %d, %d items, rv %q (whole list %q)", pages, code, len(p.Items), p.ResourceVersion, l.ResourceVersion)
		}
		seen += len(p.Items)
		if cont = p.Continue; cont == "" {
			break
		}
	}
	if seen != conns {
		t.Fatalf("paged: %d connections, want %d", seen, conns)
	}
	// The list's version names its state exactly, and no longer once the state changed.
	var same adminv1.ConnectionList
	if code := h.do("GET", base+"/namespaces/team-a/connections?resourceVersionMatch=Exact&resourceVersion="+l.ResourceVersion, "", &same); code != 200 || len(same.Items) != conns {
		t.Fatalf("exact, unchanged: %d", code)
	}
	must(t, h.st.DeleteConnection(ctx, "team-a/demo", "c000"))
	var st metav1.Status
	if code := h.do("GET", base+"/namespaces/team-a/connections?resourceVersionMatch=Exact&resourceVersion="+l.ResourceVersion, "", &st); code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("exact, changed: %d %+v", code, st)
	}
}

// watchEvent is one event of a watch stream, its object left raw.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// watchStream opens a watch as the front proxy does for ada and returns its events.
func (h *harness) watchStream(path string) <-chan watchEvent {
	h.t.Helper()
	req, _ := http.NewRequestWithContext(h.t.Context(), http.MethodGet, h.url+path, nil)
	req.Header.Set("X-Remote-User", "ada")
	resp, err := h.proxy.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("watch %s: %d", path, resp.StatusCode)
	}
	out := make(chan watchEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			var e watchEvent
			if dec.Decode(&e) != nil {
				return
			}
			out <- e
		}
	}()
	return out
}

// next returns the stream's next event, failing the test if none comes within a minute
// (a bound on a broken watch, not a timing the test depends on).
func next(t *testing.T, events <-chan watchEvent) (watchEvent, metav1.PartialObjectMetadata) {
	t.Helper()
	select {
	case e, ok := <-events:
		if !ok {
			t.Fatal("the watch ended")
		}
		var m metav1.PartialObjectMetadata
		_ = json.Unmarshal(e.Object, &m)
		return e, m
	case <-time.After(time.Minute):
		t.Fatal("no watch event within a minute")
	}
	panic("unreachable")
}

// TestWatchConnections: a watch from a list's version sends what changes after it — a new
// connection, a change of state, a removal — and nothing of another namespace; a watch from a
// version whose state has changed is refused with 410 Expired, as client-go expects.
func TestWatchConnections(t *testing.T) {
	h := newHarness(t)
	h.seed()
	ctx := t.Context()
	var l adminv1.ConnectionList
	h.do("GET", base+"/namespaces/team-a/connections", "", &l)
	events := h.watchStream(base + "/namespaces/team-a/connections?watch=true&resourceVersion=" + l.ResourceVersion)

	// Another namespace's change first: the team-a watch must not carry it.
	_, err := h.st.SaveConnection(ctx, store.Connection{ID: "conn-bob-2", Project: "team-b/demo", Subject: "bob",
		Connector: "team-b/linear", AccountID: "2", AccountName: "bob-linear", KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
	must(t, err)
	_, err = h.st.SaveConnection(ctx, store.Connection{ID: "conn-alice-2", Project: "team-a/demo", Subject: "alice",
		Connector: "team-a/linear", AccountID: "2", AccountName: "alice-linear", KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
	must(t, err)
	e, m := next(t, events)
	var added adminv1.Connection
	must(t, json.Unmarshal(e.Object, &added))
	if e.Type != "ADDED" || m.Name != "conn-alice-2" || m.Namespace != "team-a" || added.Account != "alice-linear" || m.ResourceVersion == "" {
		t.Fatalf("first event: %s %s/%s rv %q", e.Type, m.Namespace, m.Name, m.ResourceVersion)
	}
	addedRV := m.ResourceVersion

	_, err = h.st.UpdateConnection(ctx, "team-a/demo", "conn-alice", func(c store.Connection) (store.Connection, error) {
		c.Status = store.ConnectionNeedsReconnect
		return c, nil
	})
	must(t, err)
	e, m = next(t, events)
	var changed adminv1.Connection
	must(t, json.Unmarshal(e.Object, &changed))
	if e.Type != "MODIFIED" || m.Name != "conn-alice" || changed.State != "needs_reconnect" {
		t.Fatalf("second event: %s %s state %q", e.Type, m.Name, changed.State)
	}

	must(t, h.st.DeleteConnection(ctx, "team-a/demo", "conn-alice-2"))
	e, m = next(t, events)
	if e.Type != "DELETED" || m.Name != "conn-alice-2" {
		t.Fatalf("third event: %s %s", e.Type, m.Name)
	}
	// Each event's version is the listing's after it: a list now has the last one.
	var now2 adminv1.ConnectionList
	h.do("GET", base+"/namespaces/team-a/connections", "", &now2)
	if now2.ResourceVersion != m.ResourceVersion {
		t.Fatalf("list version %q after the events, last event's %q", now2.ResourceVersion, m.ResourceVersion)
	}

	// Resuming from the ADDED event's version: the state has moved on since, so 410.
	stale := h.watchStream(base + "/namespaces/team-a/connections?watch=true&resourceVersion=" + addedRV)
	e, _ = next(t, stale)
	var st metav1.Status
	must(t, json.Unmarshal(e.Object, &st))
	if e.Type != "ERROR" || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("watch from a stale version: %s %+v", e.Type, st)
	}
}

// TestWatchAuditRecords: an audit watch sends the records after its version, in order, each
// with its id as version; with sendInitialEvents it first sends what there is and a bookmark
// marking the end of it (client-go's streaming list); a version older than retention kept is
// 410 Expired.
func TestWatchAuditRecords(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	must(t, h.st.AppendAudit(ctx, store.AuditRecord{Project: "team-a/demo", Time: now, Actor: "alice", Action: "first"}))
	var l adminv1.AuditRecordList
	h.do("GET", base+"/namespaces/team-a/auditrecords", "", &l)
	events := h.watchStream(base + "/namespaces/team-a/auditrecords?watch=true&resourceVersion=" + l.ResourceVersion)
	streamed := h.watchStream(base + "/namespaces/team-a/auditrecords?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan")
	e, m := next(t, streamed)
	if e.Type != "ADDED" || m.Name != l.Items[0].Name {
		t.Fatalf("initial event: %s %s", e.Type, m.Name)
	}
	e, m = next(t, streamed)
	if e.Type != "BOOKMARK" || m.Annotations[metav1.InitialEventsAnnotationKey] != "true" || m.ResourceVersion != l.ResourceVersion {
		t.Fatalf("end of initial events: %s %+v", e.Type, m.ObjectMeta)
	}

	must(t, h.st.AppendAudit(ctx, store.AuditRecord{Project: "team-b/demo", Time: now, Actor: "bob", Action: "elsewhere"}))
	must(t, h.st.AppendAudit(ctx, store.AuditRecord{Project: "team-a/demo", Time: now, Actor: "alice", Action: "second"}))
	for _, ch := range []<-chan watchEvent{events, streamed} {
		e, m := next(t, ch)
		var r adminv1.AuditRecord
		must(t, json.Unmarshal(e.Object, &r))
		if e.Type != "ADDED" || r.Action != "second" || m.ResourceVersion != strconv.FormatInt(r.ID, 10) {
			t.Fatalf("new record: %s %+v", e.Type, r)
		}
	}
}

// retained is a store whose audit log starts at first, as after retention deleted the records
// before it.
type retained struct {
	*sqlstore.Store
	first int64
}

func (r retained) AuditBounds(ctx context.Context) (int64, int64, error) {
	_, last, err := r.Store.AuditBounds(ctx)
	return r.first, last, err
}

// TestAuditTooOld: a watch or a continued list from before the oldest record kept cannot be
// served whole (the records after it may be gone), so it is 410 Expired; from just before the
// oldest record kept it is served.
func TestAuditTooOld(t *testing.T) {
	full := newHarness(t)
	ctx := t.Context()
	for range 3 {
		must(t, full.st.AppendAudit(ctx, store.AuditRecord{Project: "team-a/demo", Time: now, Actor: "alice", Action: "a"}))
	}
	var page adminv1.AuditRecordList
	full.do("GET", base+"/namespaces/team-a/auditrecords?limit=1", "", &page)
	if len(page.Items) != 1 || page.Items[0].ID != 1 || page.Continue == "" {
		t.Fatalf("first page: %+v", page)
	}
	h := startAdmin(t, retained{full.st, 3}, full.holder, func() time.Time { return now }, nil)
	var st metav1.Status
	if code := h.do("GET", base+"/namespaces/team-a/auditrecords?limit=1&continue="+page.Continue, "", &st); code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("continue after retention: %d %+v", code, st)
	}
	e, _ := next(t, h.watchStream(base+"/namespaces/team-a/auditrecords?watch=true&resourceVersion=1"))
	must(t, json.Unmarshal(e.Object, &st))
	if e.Type != "ERROR" || st.Code != 410 {
		t.Fatalf("watch from before retention: %s %+v", e.Type, st)
	}
	must(t, full.st.AppendAudit(ctx, store.AuditRecord{Project: "team-a/demo", Time: now, Actor: "alice", Action: "new"}))
	e, m := next(t, h.watchStream(base+"/namespaces/team-a/auditrecords?watch=true&resourceVersion=2"))
	if e.Type != "ADDED" || m.Name != "3" {
		t.Fatalf("watch from just before the oldest kept: %s %s", e.Type, m.Name)
	}
}

// TestWatchSeesOtherReplicas: on PostgreSQL, with two replicas on one database, a watch served
// by one sees a connection and an audit record written through the other.
func TestWatchSeesOtherReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	replicas := make([]*sqlstore.Store, 2)
	for i := range replicas {
		st, err := sqlstore.Open(ctx, dsn)
		must(t, err)
		t.Cleanup(func() { st.Close() })
		replicas[i] = st
	}
	holder := &config.Holder{}
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{"team-a/demo": project("team-a", "demo")}})
	h := startAdmin(t, replicas[0], holder, func() time.Time { return now }, nil)
	must(t, upsert(ctx, replicas[1], "team-a/demo", "alice", "alice@example.com"))

	var conns adminv1.ConnectionList
	h.do("GET", base+"/namespaces/team-a/connections", "", &conns)
	var audit adminv1.AuditRecordList
	h.do("GET", base+"/namespaces/team-a/auditrecords", "", &audit)
	connEvents := h.watchStream(base + "/namespaces/team-a/connections?watch=true&resourceVersion=" + conns.ResourceVersion)
	auditEvents := h.watchStream(base + "/namespaces/team-a/auditrecords?watch=true&resourceVersion=" + audit.ResourceVersion)

	_, err := replicas[1].SaveConnection(ctx, store.Connection{ID: "conn-elsewhere", Project: "team-a/demo", Subject: "alice",
		Connector: "team-a/github", AccountID: "1", AccountName: "alice-gh", KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
	must(t, err)
	must(t, replicas[1].AppendAudit(ctx, store.AuditRecord{Project: "team-a/demo", Time: now, Actor: "alice", Action: "elsewhere"}))
	if e, m := next(t, connEvents); e.Type != "ADDED" || m.Name != "conn-elsewhere" {
		t.Fatalf("connection from the other replica: %s %s", e.Type, m.Name)
	}
	e, _ := next(t, auditEvents)
	var r adminv1.AuditRecord
	must(t, json.Unmarshal(e.Object, &r))
	if e.Type != "ADDED" || r.Action != "elsewhere" {
		t.Fatalf("audit record from the other replica: %s %+v", e.Type, r)
	}
}

// TestWatchOutlivesServerTimeouts: the listener's read and write timeouts bound ordinary
// requests (cmd/latchkey sets a minute); a watch outlives them and still delivers. The
// timeouts are net/http's own deadlines on the real clock, so the test waits past them.
func TestWatchOutlivesServerTimeouts(t *testing.T) {
	h := newHarness(t)
	h.server.Config.ReadTimeout, h.server.Config.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	h.seed()
	// A fresh connection, so the server's new timeouts apply to it.
	h.proxy = h.client(h.certs.serving, h.certs.proxyCA, "front-proxy-client")
	var l adminv1.ConnectionList
	h.do("GET", base+"/namespaces/team-a/connections", "", &l)
	events := h.watchStream(base + "/namespaces/team-a/connections?watch=true&resourceVersion=" + l.ResourceVersion)
	time.Sleep(300 * time.Millisecond) // three times both timeouts
	_, err := h.st.SaveConnection(t.Context(), store.Connection{ID: "conn-late", Project: "team-a/demo", Subject: "alice",
		Connector: "team-a/linear", AccountID: "2", AccountName: "alice-linear", KeyID: "k", TokenType: "bearer", CreatedAt: now, UpdatedAt: now})
	must(t, err)
	if e, m := next(t, events); e.Type != "ADDED" || m.Name != "conn-late" {
		t.Fatalf("after the timeouts: %s %s", e.Type, m.Name)
	}
}
