package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"

	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/events"
	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/secret"
	"latchkey.dev/latchkey/internal/store"
	sqlstore "latchkey.dev/latchkey/internal/store/sql"
	"latchkey.dev/latchkey/internal/testclock"
	"latchkey.dev/latchkey/internal/upstream"
)

// A failed refresh and a recovery reach the Project's event sinks as the serve process wires
// them: the vault's records go to the audit log, and the relay queues one event per sink.
func TestConnectionHealthReachesTheSinks(t *testing.T) {
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "latchkey.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clk := testclock.New(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	var status atomic.Int32
	status.Store(http.StatusServiceUnavailable)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if s := int(status.Load()); s != http.StatusOK {
			w.WriteHeader(s)
			w.Write([]byte(`{"error":"temporarily_unavailable"}`))
			return
		}
		w.Write([]byte(`{"access_token":"at2","refresh_token":"rt2","token_type":"Bearer","expires_in":3600}`))
	}))
	defer svc.Close()
	c := &config.Connector{Key: "team/svc", ClientID: "c", ClientSecret: "s", TokenURL: svc.URL, AllowedNetworks: netguard.Loopback}
	p := &config.Project{Key: "team/demo", Issuer: "https://auth.example.test/team/demo",
		Connectors: map[string]*config.Connector{c.Key: c},
		EventSinks: []config.EventSink{{Name: "chat", URL: "https://chat.example.test/hook", HMACKey: bytes.Repeat([]byte("k"), 32)}}}
	holder := &config.Holder{}
	holder.Store(&config.Snapshot{Projects: map[string]*config.Project{p.Key: p}})
	kr, err := secret.NewKeyring(map[string][]byte{"a": bytes.Repeat([]byte("a"), 32)}, "a")
	if err != nil {
		t.Fatal(err)
	}
	v := &upstream.Vault{Store: st, Keyring: kr, Now: clk.Now, TrackUses: true, Record: auditRecorder(st, logr.Discard())}
	conn := store.Connection{ID: "conn-1", Project: p.Key, Subject: "person-alice", Connector: c.Key, AccountID: "1",
		AccountName: "alice", CreatedAt: clk.Now(), UpdatedAt: clk.Now()}
	v.Seal(&conn, &oauth2.Token{AccessToken: "at", RefreshToken: "rt", ExpiresIn: 3600})
	if _, err := st.SaveConnection(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if _, err := v.TokenFor(ctx, c, conn); err != nil {
		t.Fatal(err)
	}
	r := &upstream.Refresher{Vault: v, Store: st, Config: holder}
	d := &events.Deliverer{Store: st, Config: holder, Now: clk.Now, Registerer: prometheus.NewRegistry()}
	delivered := func() []events.CloudEvent {
		t.Helper()
		if _, err := d.Relay(ctx); err != nil {
			t.Fatal(err)
		}
		claimed, err := st.ClaimEvents(ctx, clk.Now(), time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []events.CloudEvent
		for _, e := range claimed {
			var ce events.CloudEvent
			if err := json.Unmarshal(e.Data, &ce); err != nil {
				t.Fatal(err)
			}
			out = append(out, ce)
			if err := st.MarkDelivered(ctx, e.ID, e.Sink, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}

	clk.Advance(55 * time.Minute)
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got := delivered()
	if len(got) != 1 || got[0].Type != "dev.latchkey.connection.refresh_failed" || got[0].Subject != "person-alice" ||
		got[0].Data.Reason != "upstream_error" || got[0].Data.Outcome != store.OutcomeFailed || got[0].Data.Connector != c.Key ||
		got[0].Data.Details["state"] != "expiring" || got[0].Data.Details["connection_id"] != "conn-1" {
		t.Fatalf("after a failed refresh: %+v", got)
	}
	status.Store(http.StatusOK)
	clk.Advance(time.Minute)
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got = delivered()
	if len(got) != 1 || got[0].Type != "dev.latchkey.connection.recovered" || got[0].Data.Details["state"] != "active" {
		t.Fatalf("after the recovery: %+v", got)
	}
}
