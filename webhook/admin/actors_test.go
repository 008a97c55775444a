package admin_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/store"
)

// A connection shows which agents acted for its person (docs/delegation.md): the object lists
// each agent with the agents it acted through and when it last did, the latest first, and the
// table (what kubectl latchkey get connections -o wide prints) says "agent (via caller) age".
// Another namespace's connection shows none of them.
func TestConnectionShowsActors(t *testing.T) {
	h := newHarness(t)
	h.seed()
	ctx := t.Context()
	must(t, h.st.RecordConnectionActor(ctx, store.ConnectionActor{Project: "team-a/demo", ConnectionID: "conn-alice",
		ClientID: "repo-helper", LastUsedAt: now.Add(-2 * time.Hour)}))
	must(t, h.st.RecordConnectionActor(ctx, store.ConnectionActor{Project: "team-a/demo", ConnectionID: "conn-alice",
		ClientID: "github-tools", Via: "repo-helper", LastUsedAt: now.Add(-time.Minute)}))

	var c adminv1.Connection
	if code := h.do("GET", base+"/namespaces/team-a/connections/conn-alice", "", &c); code != 200 {
		t.Fatalf("get: %d", code)
	}
	if len(c.Actors) != 2 || c.Actors[0].ClientID != "github-tools" || strings.Join(c.Actors[0].Via, ",") != "repo-helper" ||
		!c.Actors[0].LastUsed.Time.Equal(now.Add(-time.Minute)) || c.Actors[1].ClientID != "repo-helper" || len(c.Actors[1].Via) != 0 {
		t.Fatalf("actors %+v", c.Actors)
	}

	var table metav1.Table
	code := h.do("GET", base+"/namespaces/team-a/connections", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json", &table)
	if code != 200 || len(table.Rows) != 1 {
		t.Fatalf("table: %d %+v", code, table)
	}
	last := len(table.ColumnDefinitions) - 1
	cell, _ := table.Rows[0].Cells[last].(string)
	if table.ColumnDefinitions[last].Name != "Actors" || !strings.Contains(cell, "(via repo-helper)") ||
		!strings.Contains(cell, ", ") {
		t.Fatalf("actors cell %q (column %q)", cell, table.ColumnDefinitions[last].Name)
	}

	var bob adminv1.ConnectionList
	h.do("GET", base+"/namespaces/team-b/connections", "", &bob)
	for _, item := range bob.Items {
		if len(item.Actors) != 0 {
			t.Fatalf("team-b's connection shows team-a's actors: %+v", item.Actors)
		}
	}
}
