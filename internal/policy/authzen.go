package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/internal/netguard"
)

// Defaults of an Engine.
const (
	// DefaultTimeout bounds one question to a decision point: it is asked while an agent or a
	// person waits for an answer.
	DefaultTimeout = 500 * time.Millisecond
	// DefaultCacheFor is how long a decision point's answer is reused for the same question:
	// an agent calling a tool in a loop asks once every few seconds, not on every call.
	DefaultCacheFor = 5 * time.Second
	// maxCached bounds the cache; past it, expired answers are dropped, then all of them.
	maxCached = 4096
	// maxAnswer bounds a decision point's response body.
	maxAnswer = 64 << 10
)

// Engine is the Decider the server uses: the Cedar policies of the request's Set, then the
// Set's decision point, if any, with its answers cached per question.
type Engine struct {
	now      func() time.Time
	timeout  time.Duration
	cacheFor time.Duration
	log      logr.Logger

	mu      sync.Mutex
	clients map[string]*http.Client
	cache   map[[32]byte]cached
}

type cached struct {
	allow   bool
	expires time.Time
}

// NewEngine returns an Engine reading the time from now, with DefaultTimeout and
// DefaultCacheFor when timeout or cacheFor are zero.
func NewEngine(now func() time.Time, log logr.Logger, timeout, cacheFor time.Duration) *Engine {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if cacheFor <= 0 {
		cacheFor = DefaultCacheFor
	}
	return &Engine{now: now, log: log, timeout: timeout, cacheFor: cacheFor,
		clients: map[string]*http.Client{}, cache: map[[32]byte]cached{}}
}

// Decide implements Decider.
func (e *Engine) Decide(ctx context.Context, req Request) Decision {
	s := req.Policies
	if s == nil {
		return Allowed
	}
	d := s.evaluate(req)
	if !d.Allow || s.point == nil {
		return d
	}
	return e.ask(ctx, s, req)
}

// The Access Evaluation API's request and response (OpenID AuthZEN Authorization API 1.0,
// §6.1 and §6.2). The agent, the time and the network are context: the subject is the person
// the agent acts for, as in the Cedar model.
type evaluation struct {
	Subject  entity         `json:"subject"`
	Resource entity         `json:"resource"`
	Action   action         `json:"action"`
	Context  map[string]any `json:"context"`
}

type entity struct {
	Type       string         `json:"type"`
	ID         string         `json:"id"`
	Properties map[string]any `json:"properties,omitempty"`
}

type action struct {
	Name string `json:"name"`
}

type answer struct {
	Decision *bool `json:"decision"`
}

func (s *Set) evaluationBody(req Request) ([]byte, error) {
	t := req.Time.In(s.location)
	ctxMap := map[string]any{
		"agent": map[string]any{"client_id": req.Agent.ClientID, "name": req.Agent.Name, "registered": req.Agent.Registered},
		// The minute, not the instant: the same question within a minute is the same question,
		// so its answer can be reused.
		"time": map[string]any{"hour": t.Hour(), "minute": t.Minute(), "weekday": strings.ToLower(t.Weekday().String()), "time_zone": s.location.String()},
	}
	if req.Address.IsValid() {
		ctxMap["network"] = map[string]any{"address": req.Address.Unmap().String()}
	}
	if len(req.AuthorizationDetails) > 0 && json.Valid(req.AuthorizationDetails) {
		ctxMap["authorization_details"] = req.AuthorizationDetails
	}
	groups := req.Person.Groups
	if groups == nil {
		groups = []string{}
	}
	return json.Marshal(evaluation{
		Subject:  entity{Type: "person", ID: req.Person.Subject, Properties: map[string]any{"email": req.Person.Email, "groups": groups}},
		Resource: entity{Type: strings.ToLower(string(req.Resource.Kind)), ID: req.Resource.ID},
		Action:   action{Name: string(req.Action)},
		Context:  ctxMap,
	})
}

// ask puts the request to the Set's decision point. Anything but a timely 200 with a boolean
// decision denies: a decision point that cannot be reached never lets a request through.
func (e *Engine) ask(ctx context.Context, s *Set, req Request) Decision {
	body, err := s.evaluationBody(req)
	if err != nil {
		return e.unavailable(s, err)
	}
	key := sha256.Sum256(append([]byte(s.point.URL+"\n"), body...))
	now := e.now()
	if allow, ok := e.lookup(key, now); ok {
		return pointDecision(s, allow)
	}
	allow, err := e.post(ctx, s.point, body)
	if err != nil {
		return e.unavailable(s, err)
	}
	e.store(key, allow, now)
	return pointDecision(s, allow)
}

func pointDecision(s *Set, allow bool) Decision {
	if allow {
		return Allowed
	}
	return Decision{Policy: s.point.URL, Reason: "the project's decision point at " + host(s.point.URL) + " denies it"}
}

func (e *Engine) unavailable(s *Set, err error) Decision {
	e.log.Info("access decision point did not decide; denying", "url", s.point.URL, "error", err.Error())
	return Decision{Policy: s.point.URL, Reason: "the project's decision point at " + host(s.point.URL) + " did not answer, so the request is refused"}
}

func host(u string) string {
	if pu, err := url.Parse(u); err == nil && pu.Host != "" {
		return pu.Host
	}
	return u
}

func (e *Engine) post(ctx context.Context, dp *DecisionPoint, body []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, dp.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	resp, err := e.client(dp.Allowed).Do(hr)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := netguard.ReadAtMost(resp.Body, maxAnswer)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("status %d", resp.StatusCode)
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return false, fmt.Errorf("response: %w", err)
	}
	if a.Decision == nil {
		return false, fmt.Errorf("response has no boolean decision")
	}
	return *a.Decision, nil
}

// client returns the HTTP client for one set of allowed ranges: one per Project setting, so
// connections are reused across requests.
func (e *Engine) client(al netguard.Allowed) *http.Client {
	key := fmt.Sprint(al)
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.clients[key]
	if !ok {
		c = netguard.Client(e.timeout, al, nil)
		e.clients[key] = c
	}
	return c
}

func (e *Engine) lookup(key [32]byte, now time.Time) (allow, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.cache[key]
	if !ok || !now.Before(c.expires) {
		return false, false
	}
	return c.allow, true
}

func (e *Engine) store(key [32]byte, allow bool, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.cache) >= maxCached {
		for k, c := range e.cache {
			if !now.Before(c.expires) {
				delete(e.cache, k)
			}
		}
		if len(e.cache) >= maxCached {
			clear(e.cache)
		}
	}
	e.cache[key] = cached{allow: allow, expires: now.Add(e.cacheFor)}
}
