// Package policy decides whether a person's agent may go on at the three moments Latchkey hands
// something out: the person's consent, the issuing of a token, and a token exchange for a
// connected service (docs/policy.md). A Project's AccessPolicies are Cedar policies, compiled
// once per configuration snapshot into a Set and evaluated in process; a Project may also name
// an external OpenID AuthZEN 1.0 decision point, asked after its own policies allow.
//
// Handlers see one interface, Decider, through site.Env. No Set (no AccessPolicy and no
// decision point) allows, as Latchkey did before policies existed; everything else fails
// closed: a policy that does not compile, a forbid policy that errors, and a decision point
// that does not answer in time all deny.
package policy

import (
	"context"
	"encoding/json"
	"net/netip"
	"time"
)

// Action is what the agent is about to receive.
type Action string

// The actions policies are asked about (Action::"consent" and so on).
const (
	// ActionConsent: the person approves an agent at the consent page.
	ActionConsent Action = "consent"
	// ActionIssue: the token endpoint issues the agent a token for the person
	// (authorization code and refresh token grants).
	ActionIssue Action = "issue"
	// ActionExchange: the agent exchanges the person's token for their token at a connected
	// service (RFC 8693).
	ActionExchange Action = "exchange"
)

// Request is one question: may this agent, acting for this person, do Action to Resource now?
type Request struct {
	// Policies are the Project's compiled policies (config.Project.AccessPolicy); nil allows.
	Policies *Set
	Action   Action
	Person   Person
	Agent    Agent
	// Resource is the Connector (its token-exchange audience) at exchange; at consent and
	// issue, the audience the token is for: a requested RFC 8707 resource, or the issuer.
	Resource Resource
	// AuthorizationDetails are the approved RFC 9396 authorization_details, when the request
	// carries any (a JSON array); nil otherwise.
	AuthorizationDetails json.RawMessage
	// Address is the client's address, when known.
	Address netip.Addr
	// Time is when the request is made; policies see it in the Project's time zone.
	Time time.Time
}

// Person is the principal: whom the agent acts for.
type Person struct {
	// Subject is the person's subject identifier in the Project (the token's sub).
	Subject string
	Email   string
	// Groups are the person's groups where the sign-in method says them.
	Groups []string
}

// Agent is the OAuth client acting for the person.
type Agent struct {
	ClientID string
	Name     string
	// Registered is true for clients registered at run time or described by a client ID
	// metadata document; false for OAuthClients an administrator declared.
	Registered bool
}

// ResourceKind says which entity type a Resource is.
type ResourceKind string

// Resource entity types.
const (
	// KindConnector is a connected service, named by its token-exchange audience.
	KindConnector ResourceKind = "Connector"
	// KindAudience is what a Latchkey token is for: an RFC 8707 resource URI or the issuer.
	KindAudience ResourceKind = "Audience"
)

// Resource is what the agent asks for.
type Resource struct {
	Kind ResourceKind
	ID   string
}

// Decision is a Decider's answer.
type Decision struct {
	Allow bool
	// Policy names what denied: "namespace/name/id" of a Cedar policy (its @id annotation, or
	// policyN by position), "namespace/name" of an AccessPolicy that does not compile, the
	// default deny of a Project whose permit policies all missed, or the decision point's URL.
	Policy string
	// Reason is a sentence for the refusal's error_description.
	Reason string
}

// Decider decides requests. Engine is the one implementation; a nil Decider allows.
type Decider interface {
	Decide(ctx context.Context, req Request) Decision
}

// Allowed is the decision of a request no policy governs.
var Allowed = Decision{Allow: true}

// Decide asks d, or allows when d is nil (servers built without policies: tests and tools).
func Decide(ctx context.Context, d Decider, req Request) Decision {
	if d == nil || req.Policies == nil {
		return Allowed
	}
	return d.Decide(ctx, req)
}
