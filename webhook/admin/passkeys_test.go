package admin_test

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/store"
)

// Credential IDs whose base64url names use '-' and '_'.
var (
	alicePhone  = []byte{0xfb, 0xff, 0x01}
	aliceKey    = []byte{0xf8, 0x3e, 0x02}
	bobsPasskey = []byte{0xfb, 0xff, 0x03}
)

func b64(id []byte) string { return base64.RawURLEncoding.EncodeToString(id) }

// seedPasskeys gives alice (team-a/demo) a synced passkey and a security key, and bob
// (team-b/demo) one passkey; seed first.
func (h *harness) seedPasskeys() {
	h.t.Helper()
	ctx := h.t.Context()
	for _, k := range []store.Passkey{
		{Project: "team-a/demo", CredentialID: alicePhone, Subject: "alice", Name: "Passkey 1", BackupEligible: true,
			AAGUID: make([]byte, 16), Transports: []string{"internal", "hybrid"}, CreatedAt: now.Add(-time.Hour), LastUsedAt: now.Add(-time.Minute)},
		{Project: "team-a/demo", CredentialID: aliceKey, Subject: "alice", Name: "Passkey 2", Transports: []string{"usb"},
			CreatedAt: now.Add(-time.Hour)},
		{Project: "team-b/demo", CredentialID: bobsPasskey, Subject: "bob", Name: "Passkey 1", CreatedAt: now},
	} {
		k.PublicKey, k.AttestationFormat, k.UserVerified = []byte("cose"), "none", true
		must(h.t, h.st.AddPasskey(ctx, k))
	}
}

// An administrator lists a person's passkeys and removes them, one at a time, in their own
// namespace only; each removal is an audit record naming the administrator.
func TestPasskeys(t *testing.T) {
	h := newHarness(t)
	h.seed()
	h.seedPasskeys()
	sink := h.withSink()
	ctx := t.Context()

	var list adminv1.PasskeyList
	if code := h.do("GET", base+"/namespaces/team-a/passkeys", "", &list); code != 200 || list.Kind != "PasskeyList" || len(list.Items) != 2 {
		t.Fatalf("team-a passkeys: %d %+v", code, list)
	}
	k := list.Items[0] // in credential ID order: aliceKey first
	if k.Name != b64(aliceKey) || k.Person != "alice" || k.Project != "demo" || k.Namespace != "team-a" || k.DisplayName != "Passkey 2" ||
		k.Synced || k.LastUsed != nil || k.Labels[adminv1.PersonLabel] != "alice" {
		t.Fatalf("alice's security key: %+v", k)
	}
	if k := list.Items[1]; k.Name != b64(alicePhone) || !k.Synced || k.LastUsed == nil || k.AAGUID != "00000000-0000-0000-0000-000000000000" {
		t.Fatalf("alice's synced passkey: %+v", k)
	}
	var table metav1.Table
	h.do("GET", base+"/namespaces/team-a/passkeys?fieldSelector=person%3Dalice", "application/json;as=Table;v=v1;g=meta.k8s.io", &table)
	if len(table.Rows) != 2 || table.Rows[1].Cells[1] != "alice@example.com" || table.Rows[1].Cells[4] != "60s" {
		t.Fatalf("table: %+v", table.Rows)
	}
	h.do("GET", base+"/namespaces/team-a/passkeys?labelSelector=latchkey.dev/person%3Dbob", "", &list)
	if len(list.Items) != 0 {
		t.Fatalf("bob's passkeys in team-a: %+v", list.Items)
	}
	h.do("GET", base+"/passkeys", "", &list)
	if len(list.Items) != 3 {
		t.Fatalf("every namespace: %d passkeys", len(list.Items))
	}

	// bob's passkey is in team-b: from team-a it is not there to read or remove.
	for _, method := range []string{"GET", "DELETE"} {
		var st metav1.Status
		if code := h.do(method, base+"/namespaces/team-a/passkeys/"+b64(bobsPasskey), "", &st); code != 404 || st.Reason != metav1.StatusReasonNotFound {
			t.Errorf("%s bob's passkey from team-a: %d %+v", method, code, st)
		}
	}
	if _, err := h.st.GetPasskey(ctx, "team-b/demo", bobsPasskey); err != nil {
		t.Fatalf("bob's passkey after team-a's attempts: %v", err)
	}
	for _, name := range []string{"not base64!", "AAAA"} {
		var st metav1.Status
		if code := h.do("DELETE", base+"/namespaces/team-a/passkeys/"+name, "", &st); code != 404 {
			t.Errorf("DELETE %q: %d %+v", name, code, st)
		}
	}

	var st metav1.Status
	if code := h.do("DELETE", base+"/namespaces/team-a/passkeys/"+b64(alicePhone)+"?dryRun=All", "", &st); code != 200 {
		t.Fatalf("dry run: %d %+v", code, st)
	}
	if _, err := h.st.GetPasskey(ctx, "team-a/demo", alicePhone); err != nil {
		t.Fatalf("a dry run removed the passkey: %v", err)
	}
	if code := h.do("DELETE", base+"/namespaces/team-a/passkeys/"+b64(alicePhone), "", &st); code != 200 || st.Details.UID == "" {
		t.Fatalf("remove: %d %+v", code, st)
	}
	if _, err := h.st.GetPasskey(ctx, "team-a/demo", alicePhone); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the passkey survived: %v", err)
	}
	if code := h.do("DELETE", base+"/namespaces/team-a/passkeys/"+b64(alicePhone), "", &st); code != 404 {
		t.Fatalf("again: %d %+v", code, st)
	}
	if keys, _ := h.st.ListPasskeys(ctx, "team-a/demo", "alice"); len(keys) != 1 {
		t.Fatalf("alice's other passkey: %+v", keys)
	}
	r := h.trail(sink, "team-a/demo", events.AdminPasskeyRemoved)[events.AdminPasskeyRemoved]
	if r.Target != "person:alice" || r.Details["credential_id"] != b64(alicePhone) || r.Details["name"] != "Passkey 1" {
		t.Errorf("audit record: %+v", r)
	}
}
