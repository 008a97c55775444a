package policy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/netguard"
	"latchkey.dev/latchkey/internal/policy"
	"latchkey.dev/latchkey/internal/testclock"
)

// pdp is an in-process AuthZEN 1.0 Access Evaluation API (POST /access/v1/evaluation): it
// answers {"decision": …} as the specification's §6.2 shows, allowing the people listed.
type pdp struct {
	mu      sync.Mutex
	allow   map[string]bool
	status  int           // answer with this status instead, when set
	hang    chan struct{} // when set, answer only once it is closed
	asked   int
	lastReq map[string]any
}

func (p *pdp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/access/v1/evaluation" || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "not an access evaluation", http.StatusBadRequest)
		return
	}
	var body struct {
		Subject struct {
			Type, ID string
		}
		Action struct{ Name string }
	}
	var raw map[string]any
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&raw); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b, _ := json.Marshal(raw)
	_ = json.Unmarshal(b, &body)
	p.mu.Lock()
	p.asked++
	p.lastReq = raw
	status, hang, allow := p.status, p.hang, p.allow[body.Subject.ID]
	p.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
		return
	}
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"decision": allow})
}

func (p *pdp) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked
}

func newPDP(t *testing.T, allow ...string) (*pdp, *policy.Set, string) {
	t.Helper()
	p := &pdp{allow: map[string]bool{}}
	for _, a := range allow {
		p.allow[a] = true
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	url := srv.URL + "/access/v1/evaluation"
	set := policy.Compile(nil, policy.Options{DecisionPoint: &policy.DecisionPoint{URL: url, Allowed: netguard.Loopback}})
	return p, set, url
}

func TestDecisionPoint(t *testing.T) {
	clock := testclock.New(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	ctx := context.Background()

	t.Run("allow", func(t *testing.T) {
		p, set, _ := newPDP(t, "alice")
		e := policy.NewEngine(clock.Now, logr.Discard(), 0, 0)
		if d := e.Decide(ctx, exchangeRequest(set, clock.Now())); !d.Allow {
			t.Fatalf("denied: %+v", d)
		}
		// What the decision point was asked, in the specification's shape.
		subject, _ := p.lastReq["subject"].(map[string]any)
		resource, _ := p.lastReq["resource"].(map[string]any)
		action, _ := p.lastReq["action"].(map[string]any)
		if subject["type"] != "person" || subject["id"] != "alice" || resource["type"] != "connector" || resource["id"] != "github" || action["name"] != "exchange" {
			t.Fatalf("evaluation request: %v", p.lastReq)
		}
	})
	t.Run("deny", func(t *testing.T) {
		_, set, _ := newPDP(t, "bob")
		d := policy.NewEngine(clock.Now, logr.Discard(), 0, 0).Decide(ctx, exchangeRequest(set, clock.Now()))
		if d.Allow || d.Policy == "" {
			t.Fatalf("got %+v, want a denial naming the decision point", d)
		}
	})
	t.Run("timeout denies", func(t *testing.T) {
		p, set, _ := newPDP(t, "alice")
		p.hang = make(chan struct{})
		defer close(p.hang)
		e := policy.NewEngine(clock.Now, logr.Discard(), 50*time.Millisecond, 0)
		if d := e.Decide(ctx, exchangeRequest(set, clock.Now())); d.Allow {
			t.Fatal("a decision point that did not answer allowed")
		}
	})
	t.Run("500 denies", func(t *testing.T) {
		p, set, _ := newPDP(t, "alice")
		p.status = http.StatusInternalServerError
		if d := policy.NewEngine(clock.Now, logr.Discard(), 0, 0).Decide(ctx, exchangeRequest(set, clock.Now())); d.Allow {
			t.Fatal("a decision point answering 500 allowed")
		}
	})
	t.Run("cache hit", func(t *testing.T) {
		p, set, _ := newPDP(t, "alice")
		e := policy.NewEngine(clock.Now, logr.Discard(), 0, 5*time.Second)
		for range 3 {
			if d := e.Decide(ctx, exchangeRequest(set, clock.Now())); !d.Allow {
				t.Fatalf("denied: %+v", d)
			}
		}
		if n := p.count(); n != 1 {
			t.Fatalf("asked %d times for one question within 5s, want 1", n)
		}
		// The person is no longer allowed; the cached answer stands until it expires.
		p.mu.Lock()
		p.allow["alice"] = false
		p.mu.Unlock()
		clock.Advance(4 * time.Second)
		if d := e.Decide(ctx, exchangeRequest(set, clock.Now())); !d.Allow {
			t.Fatal("the cached answer was not used")
		}
		clock.Advance(2 * time.Second)
		if d := e.Decide(ctx, exchangeRequest(set, clock.Now())); d.Allow {
			t.Fatal("an expired answer was used")
		}
		if n := p.count(); n != 2 {
			t.Fatalf("asked %d times, want 2", n)
		}
	})
	t.Run("the outgoing-address guard refuses loopback unless allowed", func(t *testing.T) {
		p, _, url := newPDP(t, "alice")
		guarded := policy.Compile(nil, policy.Options{DecisionPoint: &policy.DecisionPoint{URL: url}})
		if d := policy.NewEngine(clock.Now, logr.Discard(), 0, 0).Decide(ctx, exchangeRequest(guarded, clock.Now())); d.Allow {
			t.Fatal("dialled a loopback decision point the Project does not allow")
		}
		if p.count() != 0 {
			t.Fatal("the decision point was reached")
		}
	})
	t.Run("Cedar denial is final", func(t *testing.T) {
		p, _, url := newPDP(t, "alice")
		both := policy.Compile([]policy.Source{{Name: "team-a/p", Text: `@id("nobody") forbid(principal, action, resource);`}},
			policy.Options{DecisionPoint: &policy.DecisionPoint{URL: url, Allowed: netguard.Loopback}})
		if d := policy.NewEngine(clock.Now, logr.Discard(), 0, 0).Decide(ctx, exchangeRequest(both, clock.Now())); d.Allow || d.Policy != "team-a/p/nobody" {
			t.Fatalf("got %+v", d)
		}
		if p.count() != 0 {
			t.Fatal("the decision point was asked after the Project's own policies denied")
		}
	})
}
