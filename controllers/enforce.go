package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/clientdoc"
	"latchkey.dev/latchkey/internal/config"
	"latchkey.dev/latchkey/internal/redirect"
)

// "Only recognised apps can connect" (docs/recognised-apps.md), on the controller side. The server refuses a
// client the policy refuses wherever it shows up (consent, every grant, introspection, token
// exchange), on every replica, from the compiled snapshot alone. What only the controller can
// do is end what already exists: switching the policy on revokes, at once, every live token of
// every client it now refuses, and says how many. Revoked tokens stay revoked in the store, so
// relaxing or removing a policy later never brings them back.

// EnforceInterval is how often a RedirectPolicy that turns onlyRecognisedApps on looks again
// for tokens of refused clients (a client ID metadata document that changed its redirects, a
// registration that slipped through a race). The server refuses such tokens anyway; this only
// moves them from refused to revoked.
const EnforceInterval = 10 * time.Minute

// maxRefusedListed bounds status.refusedClients (the API allows 100).
const maxRefusedListed = 100

// defaultDocuments is the fetcher used when Options.ClientDocuments is nil.
var defaultDocuments = sync.OnceValue(func() *clientdoc.Fetcher { return clientdoc.New(clientdoc.Options{}) })

// projectRules merges the RedirectPolicies in force for a Project, as the compiler does.
func projectRules(ctx context.Context, c Reader, res *resolver, projectKey string) (config.RedirectRules, error) {
	var list v1alpha1.RedirectPolicyList
	if err := c.List(ctx, &list, MatchingFields{projectIndex: projectKey}, noCopy); err != nil {
		return config.RedirectRules{}, fmt.Errorf("listing RedirectPolicies of Project %s: %w", projectKey, err)
	}
	var inForce []*v1alpha1.RedirectPolicy
	for i := range list.Items {
		p := &list.Items[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		_, err := res.policy(ctx, p)
		if _, ok := asNotReady(err); err != nil && !ok {
			return config.RedirectRules{}, err
		}
		if err == nil {
			inForce = append(inForce, p)
		}
	}
	ns, _, _ := strings.Cut(projectKey, "/")
	return mergeRedirectRules(ns, inForce), nil
}

// classify says how the Project's rules read one redirect URI, in the API's words.
func classify(uri string, rules config.RedirectRules) v1alpha1.RedirectStatus {
	rs := v1alpha1.RedirectStatus{URI: uri, Classification: v1alpha1.RedirectOther}
	c := redirect.Classify(uri, rules)
	switch c.Kind {
	case redirect.Agent:
		// redirect.Classify tries Claude, then ChatGPT, then the named entries; so does this.
		switch {
		case rules.Claude && (uri == redirect.ClaudeAICallback || uri == redirect.ClaudeComCallback):
			rs.Classification = v1alpha1.RedirectClaude
		case rules.ChatGPT && (uri == redirect.ChatGPTPlatformCallback || redirect.MatchPattern(redirect.ChatGPTConnectorPattern, uri)):
			rs.Classification = v1alpha1.RedirectChatGPT
		default:
			rs.Classification, rs.Name = v1alpha1.RedirectNamed, c.Name
		}
	case redirect.Device:
		if strings.HasPrefix(uri, "http://") || strings.HasPrefix(uri, "https://") {
			rs.Classification = v1alpha1.RedirectLoopback
		} else {
			rs.Classification = v1alpha1.RedirectAppScheme
		}
	}
	return rs
}

// ---------------------------------------------------------------------------------------------
// OAuthClient: status.redirects and the RefusedByPolicy condition

// classifyRedirects fills status.redirects with each registered redirect URI's classification
// under the Project's RedirectPolicies, and sets RefusedByPolicy, so `kubectl get oauthclients`
// shows what is blocked and why.
func (r *clientPhases) classifyRedirects(ctx context.Context, s *clientScope) (Result, error) {
	oc := s.oc
	key := projectKeyOf(oc.Spec.ProjectRef, oc.Namespace).String()
	rules, err := projectRules(ctx, r.reader, s.res, key)
	if err != nil {
		return Result{}, err
	}
	oc.Status.Redirects = nil
	var others []string
	for _, u := range oc.Spec.RedirectURIs {
		rs := classify(string(u), rules)
		oc.Status.Redirects = append(oc.Status.Redirects, rs)
		if rs.Classification == v1alpha1.RedirectOther {
			others = append(others, string(u))
		}
	}

	was := meta.IsStatusConditionTrue(oc.Status.Conditions, v1alpha1.OAuthClientRefusedByPolicyCondition)
	c := metav1.Condition{
		Type:               v1alpha1.OAuthClientRefusedByPolicyCondition,
		ObservedGeneration: oc.Generation,
		LastTransitionTime: metav1.NewTime(r.clock()),
	}
	switch {
	case rules.OnlyRecognisedApps && len(others) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.OAuthClientUnrecognisedRedirectReason
		c.Message = truncate(fmt.Sprintf("Project %s only allows recognised apps to connect; not recognised: %s", key, strings.Join(others, ", ")))
	case rules.OnlyRecognisedApps:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.OAuthClientAllRecognisedReason
		c.Message = fmt.Sprintf("every redirect URI is recognised by Project %s", key)
	default:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.OAuthClientPolicyNotEnforcedReason
		c.Message = fmt.Sprintf("Project %s does not restrict apps to recognised ones", key)
		if len(others) > 0 {
			c.Message += "; people see a warning and a tick box for " + strings.Join(others, ", ")
			c.Message = truncate(c.Message)
		}
	}
	meta.SetStatusCondition(&oc.Status.Conditions, c)
	if c.Status == metav1.ConditionTrue && !was {
		r.recorder.Eventf(oc, nil, corev1.EventTypeWarning, c.Reason, "Refuse", "%s", c.Message)
	}
	return Result{}, nil
}

// ---------------------------------------------------------------------------------------------
// RedirectPolicy: revoke the tokens of refused clients

// enforce runs for a policy in force that turns onlyRecognisedApps on: it works out which
// clients of the Project the merged rules refuse, revokes every live token they hold, and
// reports the count (status.revokedTokens, cumulative; an Event "revoked 12 tokens held by 3
// clients") and the refused clients (status.refusedClients).
func (r *policyPhases) enforce(ctx context.Context, s *policyScope) (Result, error) {
	p := s.policy
	if !s.ready || !p.Spec.OnlyRecognisedApps {
		p.Status.RefusedClients = nil
		return Result{}, nil
	}
	rules, err := projectRules(ctx, r.reader, s.res, s.project)
	if err != nil {
		return Result{}, err
	}
	if !rules.OnlyRecognisedApps {
		// The cache has not seen this policy's own change yet; its watch brings it back.
		return Result{}, nil
	}
	refused, err := r.refusedClients(ctx, s.project, rules)
	if err != nil {
		return Result{}, err
	}
	p.Status.RefusedClients = nil
	if len(refused) > 0 {
		p.Status.RefusedClients = refused[:min(len(refused), maxRefusedListed)]
	}
	if r.store == nil || len(refused) == 0 {
		return Result{RequeueAfter: EnforceInterval}, nil
	}
	counts, err := r.store.RevokeClientTokens(ctx, s.project, refused, r.clock())
	if err != nil {
		return Result{}, fmt.Errorf("revoking the tokens of clients refused by RedirectPolicy %s/%s: %w", p.Namespace, p.Name, err)
	}
	var tokens, holders int64
	for _, n := range counts {
		if n > 0 {
			tokens += n
			holders++
		}
	}
	if tokens > 0 {
		p.Status.RevokedTokens += tokens
		msg := fmt.Sprintf("revoked %s held by %s", plural(tokens, "token"), plural(holders, "client"))
		log.FromContext(ctx).Info(msg, "project", s.project)
		r.recorder.Eventf(p, nil, corev1.EventTypeNormal, v1alpha1.RedirectPolicyTokensRevokedReason, "Revoke", "%s", msg)
	}
	return Result{RequeueAfter: EnforceInterval}, nil
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// refusedClients lists, sorted, the ids of the Project's clients that rules refuse: declared
// OAuthClients, dynamically registered clients, and clients identified by a metadata document
// that hold live tokens (whose documents are fetched to read their redirects; one that cannot be
// fetched now is left to the server, which refuses it while it stays unreadable).
func (r *policyPhases) refusedClients(ctx context.Context, projectKey string, rules config.RedirectRules) ([]string, error) {
	refused := map[string]bool{}
	var ocs v1alpha1.OAuthClientList
	if err := r.reader.List(ctx, &ocs, MatchingFields{projectIndex: projectKey}, noCopy); err != nil {
		return nil, fmt.Errorf("listing OAuthClients of Project %s: %w", projectKey, err)
	}
	for i := range ocs.Items {
		oc := &ocs.Items[i]
		uris := make([]string, len(oc.Spec.RedirectURIs))
		for j, u := range oc.Spec.RedirectURIs {
			uris[j] = string(u)
		}
		if len(redirect.Allowed(uris, rules)) > 0 {
			refused[clientIDFor(oc)] = true
		}
	}
	if r.store != nil {
		registered, err := r.store.ListClients(ctx, projectKey)
		if err != nil {
			return nil, fmt.Errorf("listing registered clients of Project %s: %w", projectKey, err)
		}
		for _, c := range registered {
			if len(redirect.Allowed(c.RedirectURIs, rules)) > 0 {
				refused[c.ID] = true
			}
		}
		live, err := r.store.CountLiveTokens(ctx, projectKey, r.clock())
		if err != nil {
			return nil, fmt.Errorf("counting live tokens of Project %s: %w", projectKey, err)
		}
		docs := r.documents
		if docs == nil {
			docs = defaultDocuments()
		}
		for id := range live {
			if !clientdoc.IsClientID(id) || refused[id] {
				continue
			}
			d, err := docs.Get(ctx, id)
			if err != nil {
				var problem *clientdoc.Error
				if !errors.As(err, &problem) {
					return nil, err
				}
				log.FromContext(ctx).V(1).Info("cannot read a client ID metadata document", "client", id, "reason", problem.Reason)
				continue
			}
			if len(redirect.Allowed(d.RedirectURIs, rules)) > 0 {
				refused[id] = true
			}
		}
	}
	out := make([]string, 0, len(refused))
	for id := range refused {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// ---------------------------------------------------------------------------------------------
// Watch mappings
