package events_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

// docs/audit.md documents every audit type, and documents no type that does not exist.
func TestEveryAuditTypeIsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Event types")
	end := strings.Index(doc, "### Families written by other parts")
	if start < 0 || end < start {
		t.Fatal("docs/audit.md has no Event types section")
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+(?:\\.[a-z_]+)+)` \\|").FindAllStringSubmatch(doc[start:end], -1) {
		documented[m[1]] = true
	}
	for _, typ := range events.AuditTypes() {
		if !documented[typ] {
			t.Errorf("%s is not in a table of docs/audit.md", typ)
		}
	}
	for typ := range documented {
		if !slices.Contains(events.AuditTypes(), typ) {
			t.Errorf("docs/audit.md documents %s, which no code writes", typ)
		}
	}
}

func TestNormalize(t *testing.T) {
	r := store.AuditRecord{Action: "connection.wrong_person", Target: "connector:team/github",
		Details: map[string]string{"client_id": "c1", "reason": "Only recognised apps, please"}}
	events.Normalize(&r)
	if r.Outcome != store.OutcomeRefused || r.Connector != "team/github" || r.ClientID != "c1" || r.Reason != "" {
		t.Errorf("normalised %+v (a free-text reason is not a code)", r)
	}
	r = store.AuditRecord{Action: "connection.failed", Details: map[string]string{"reason": "address_not_allowed", "connector": "a/b"}}
	events.Normalize(&r)
	if r.Outcome != store.OutcomeFailed || r.Reason != "address_not_allowed" || r.Connector != "a/b" {
		t.Errorf("normalised %+v", r)
	}
	r = store.AuditRecord{Action: events.TokenIssued, Outcome: store.OutcomeFailed, Reason: "x"}
	events.Normalize(&r)
	if r.Outcome != store.OutcomeFailed || r.Reason != "x" {
		t.Errorf("a writer's own outcome was replaced: %+v", r)
	}
}
