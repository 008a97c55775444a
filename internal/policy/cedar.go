package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"net/netip"
	"strings"
	"time"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"

	"latchkey.dev/latchkey/internal/netguard"
)

// Entity types of the model (docs/policy.md, "The model").
const (
	personType types.EntityType = "Person"
	agentType  types.EntityType = "Agent"
	actionType types.EntityType = "Action"
)

// DefaultPermitID names the permit Latchkey adds to a Set that has none of its own, so that
// forbid policies alone refuse only what they match.
const DefaultPermitID = "latchkey/default-permit"

// NoPermitID is what Decision.Policy says when the Project's permit policies all missed.
const NoPermitID = "latchkey/no-permit-matched"

// Source is one AccessPolicy as the compiler hands it over.
type Source struct {
	// Name is the AccessPolicy's "namespace/name".
	Name string
	// Text is its spec.policies.
	Text string
	// NarrowOnly: the AccessPolicy is in another namespace the Project admits, and may only
	// narrow what the Project's own policies allow: its permit policies are ignored.
	NarrowOnly bool
}

// Parsed is what Parse found in one AccessPolicy.
type Parsed struct {
	// IDs are the policies' ids in order: each @id annotation, or policyN by position.
	IDs []string
	// IgnoredPermits are the ids of permit policies a NarrowOnly source loses.
	IgnoredPermits []string

	policies []*cedar.Policy
}

// maxIDLength bounds an @id annotation: it is shown in refusals and audit records.
const maxIDLength = 128

// Parse checks one AccessPolicy's Cedar text. The error says where the text is wrong (Cedar's
// "line:column" after the AccessPolicy's name), or which @id is repeated.
func Parse(src Source) (*Parsed, error) {
	list, err := cedar.NewPolicyListFromBytes(src.Name, []byte(src.Text))
	if err != nil {
		return nil, errors.New(strings.Replace(err.Error(), "<input>", src.Name, 1))
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: no policy statements", src.Name)
	}
	out := &Parsed{}
	seen := map[string]bool{}
	for i, p := range list {
		id := fmt.Sprintf("policy%d", i)
		if a, ok := p.Annotations()["id"]; ok {
			id = string(a)
		}
		if id == "" || len(id) > maxIDLength || strings.ContainsAny(id, "\n\r\t") {
			return nil, fmt.Errorf("%s:%d: @id must be 1 to %d characters on one line", src.Name, p.Position().Line, maxIDLength)
		}
		if seen[id] {
			return nil, fmt.Errorf("%s:%d: @id(%q) is used twice", src.Name, p.Position().Line, id)
		}
		seen[id] = true
		if src.NarrowOnly && p.Effect() == cedar.Permit {
			out.IgnoredPermits = append(out.IgnoredPermits, id)
			continue
		}
		out.IDs = append(out.IDs, id)
		out.policies = append(out.policies, p)
	}
	return out, nil
}

// Options are a Project's settings for its policies.
type Options struct {
	// Location is the time zone context.time is in; nil means UTC.
	Location *time.Location
	// DecisionPoint, when set, is asked after the Project's own policies allow.
	DecisionPoint *DecisionPoint
}

// DecisionPoint is an external OpenID AuthZEN 1.0 policy decision point.
type DecisionPoint struct {
	// URL is its Access Evaluation API endpoint (…/access/v1/evaluation).
	URL string
	// Allowed are the address ranges outside the public internet it may be dialled at (the
	// Project's spec.upstreamNetwork.allowedCIDRs).
	Allowed netguard.Allowed
}

// Set is a Project's compiled policies: parsed once per configuration snapshot, evaluated on
// every request. It is immutable and shared by every request that reads the snapshot.
type Set struct {
	policies []idPolicy
	forbids  map[types.PolicyID]bool
	// invalid, when set, names an AccessPolicy that does not compile: every request is denied.
	invalid       string
	invalidReason string
	location      *time.Location
	point         *DecisionPoint
	// readsEmail: some policy mentions an email, or a decision point is asked (it gets the
	// person's email): only then does a flow read the person to say it.
	readsEmail bool
}

// ReadsEmail reports whether a request's Person.Email can make a difference: flows that would
// need a store read to fill it in skip the read otherwise.
func (s *Set) ReadsEmail() bool { return s != nil && s.readsEmail }

type idPolicy struct {
	id types.PolicyID
	p  *cedar.Policy
}

// All implements cedar.PolicyIterator, in the order the policies were compiled, so the first
// policy a refusal names is always the same one.
func (s *Set) All() iter.Seq2[types.PolicyID, *cedar.Policy] {
	return func(yield func(types.PolicyID, *cedar.Policy) bool) {
		for _, ip := range s.policies {
			if !yield(ip.id, ip.p) {
				return
			}
		}
	}
}

// Compile builds a Project's Set from its AccessPolicies, in the order given (the compiler
// sorts them by name). It returns nil when there is nothing to decide: no source and no
// decision point. A source that does not parse makes the Set deny everything, naming it: a
// Project whose administrator meant to restrict agents never serves unrestricted because of a
// typo (docs/decisions/0077).
func Compile(sources []Source, opts Options) *Set {
	if len(sources) == 0 && opts.DecisionPoint == nil {
		return nil
	}
	s := &Set{forbids: map[types.PolicyID]bool{}, location: opts.Location, point: opts.DecisionPoint, readsEmail: opts.DecisionPoint != nil}
	if s.location == nil {
		s.location = time.UTC
	}
	permits := 0
	for _, src := range sources {
		s.readsEmail = s.readsEmail || strings.Contains(src.Text, "email")
		parsed, err := Parse(src)
		if err != nil {
			s.invalid, s.invalidReason = src.Name, err.Error()
			s.policies = nil
			return s
		}
		for i, p := range parsed.policies {
			id := types.PolicyID(src.Name + "/" + parsed.IDs[i])
			s.policies = append(s.policies, idPolicy{id: id, p: p})
			if p.Effect() == cedar.Forbid {
				s.forbids[id] = true
			} else {
				permits++
			}
		}
	}
	if permits == 0 {
		var p cedar.Policy
		if err := p.UnmarshalCedar([]byte(`permit(principal, action, resource);`)); err != nil {
			panic(err) // a constant that always parses
		}
		s.policies = append(s.policies, idPolicy{id: DefaultPermitID, p: &p})
	}
	return s
}

// Refuse returns a Set that denies every request, naming what is wrong: a Project setting the
// Set cannot honour.
func Refuse(name, reason string) *Set {
	return &Set{invalid: name, invalidReason: reason, location: time.UTC}
}

// Invalid names the AccessPolicy that keeps the Set from compiling, and why; "" when it
// compiled.
func (s *Set) Invalid() (name, reason string) { return s.invalid, s.invalidReason }

// evaluate runs the Cedar policies. A forbid policy that fails to evaluate (an attribute the
// request lacks, a type mismatch) denies as if it matched: Cedar skips such a policy, which
// for a forbid would let through what it was written to stop.
func (s *Set) evaluate(req Request) Decision {
	if s.invalid != "" {
		return Decision{Policy: s.invalid, Reason: s.invalid + " is not valid, so the project refuses every request until it is fixed"}
	}
	entities, creq := s.cedarRequest(req)
	dec, diag := cedar.Authorize(s, entities, creq)
	for _, e := range diag.Errors {
		if s.forbids[e.PolicyID] {
			return denied(string(e.PolicyID), "could not be evaluated for this request")
		}
	}
	if dec == cedar.Allow {
		return Allowed
	}
	for _, r := range diag.Reasons {
		if s.forbids[r.PolicyID] {
			return denied(string(r.PolicyID), "forbids it")
		}
	}
	return Decision{Policy: NoPermitID, Reason: "no permit policy of the project's AccessPolicies allows it"}
}

func denied(id, what string) Decision {
	return Decision{Policy: id, Reason: "access policy " + id + " " + what}
}

// cedarRequest builds the entities and the request of docs/policy.md's model.
func (s *Set) cedarRequest(req Request) (types.EntityMap, cedar.Request) {
	person := types.NewEntityUID(personType, types.String(req.Person.Subject))
	agent := types.NewEntityUID(agentType, types.String(req.Agent.ClientID))
	resource := types.NewEntityUID(types.EntityType(req.Resource.Kind), types.String(req.Resource.ID))
	groups := make([]types.Value, len(req.Person.Groups))
	for i, g := range req.Person.Groups {
		groups[i] = types.String(g)
	}
	entities := types.EntityMap{
		person: {UID: person, Attributes: types.NewRecord(types.RecordMap{
			"email":  types.String(req.Person.Email),
			"groups": types.NewSet(groups...),
		})},
		agent: {UID: agent, Attributes: types.NewRecord(types.RecordMap{
			"name":       types.String(req.Agent.Name),
			"registered": types.Boolean(req.Agent.Registered),
			"declared":   types.Boolean(!req.Agent.Registered),
		})},
		resource: {UID: resource},
	}
	return entities, cedar.Request{
		Principal: person,
		Action:    types.NewEntityUID(actionType, types.String(req.Action)),
		Resource:  resource,
		Context:   s.context(req, agent),
	}
}

// context is the request's context record: the agent, time, network and authorization details.
func (s *Set) context(req Request, agent types.EntityUID) types.Record {
	t := req.Time.In(s.location)
	m := types.RecordMap{
		// The agent is a reference: a policy reads its attributes as context.agent.registered.
		"agent": agent,
		"time": types.NewRecord(types.RecordMap{
			"hour":    types.Long(t.Hour()),
			"minute":  types.Long(t.Minute()),
			"weekday": types.String(strings.ToLower(t.Weekday().String())),
		}),
	}
	network := types.RecordMap{}
	if a := req.Address; a.IsValid() {
		a = a.Unmap()
		network["address"] = types.IPAddr(netip.PrefixFrom(a, a.BitLen()))
	}
	m["network"] = types.NewRecord(network)
	if len(req.AuthorizationDetails) > 0 {
		var v any
		if json.Unmarshal(req.AuthorizationDetails, &v) == nil {
			if cv, ok := cedarValue(v); ok {
				m["authorization_details"] = cv
			}
		}
	}
	return types.NewRecord(m)
}

// cedarValue turns decoded JSON into a Cedar value: objects are records, arrays sets, whole
// numbers longs; other numbers become their decimal text, and nulls are left out.
func cedarValue(v any) (types.Value, bool) {
	switch v := v.(type) {
	case string:
		return types.String(v), true
	case bool:
		return types.Boolean(v), true
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return types.Long(int64(v)), true
		}
		return types.String(fmt.Sprint(v)), true
	case []any:
		out := make([]types.Value, 0, len(v))
		for _, e := range v {
			if cv, ok := cedarValue(e); ok {
				out = append(out, cv)
			}
		}
		return types.NewSet(out...), true
	case map[string]any:
		out := types.RecordMap{}
		for k, e := range v {
			if cv, ok := cedarValue(e); ok {
				out[types.String(k)] = cv
			}
		}
		return types.NewRecord(out), true
	}
	return nil, false
}
