package controllers

import (
	"context"
	"fmt"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/config"
	lkkeys "latchkey.dev/latchkey/internal/keys"
	"latchkey.dev/latchkey/internal/workload"
)

// compile builds a complete snapshot from what r holds, and returns the resolver, which
// records every Secret and ConfigMap looked up. It is linear in the number of objects: one List
// per kind and cache lookups per object.
func compile(ctx context.Context, r Reader, publicURL string, signing *lkkeys.Signing, bundles *workload.Bundles) (*config.Snapshot, *resolver, error) {
	res := newResolver(r, publicURL)
	res.signing = signing
	res.bundles = bundles
	snap := &config.Snapshot{Projects: map[string]*config.Project{}}
	// Projects first: everything else is added to the Project it attaches to.
	for _, add := range []snapshotStep{addProjects, addConnectors, addRedirectRules, addAccessPolicies, addClients} {
		if err := add(ctx, r, res, snap); err != nil {
			return nil, nil, err
		}
	}
	return snap, res, nil
}

// snapshotStep adds one kind of object to snap. An object that is not Ready is left out; an
// error is a cache read failure, and the whole compilation is retried.
type snapshotStep func(ctx context.Context, r Reader, res *resolver, snap *config.Snapshot) error

func addProjects(ctx context.Context, r Reader, res *resolver, snap *config.Snapshot) error {
	var projects v1alpha1.ProjectList
	if err := r.List(ctx, &projects, noCopy); err != nil {
		return fmt.Errorf("listing Projects: %w", err)
	}
	for i := range projects.Items {
		pr, err := res.projectFromObject(ctx, &projects.Items[i])
		if err != nil {
			return err
		}
		// Also with pr.err set: a Secret problem turns off a feature, not the Project.
		if pr.compiled != nil {
			snap.Projects[pr.compiled.Key] = pr.compiled
		}
	}
	return nil
}

func addConnectors(ctx context.Context, r Reader, res *resolver, snap *config.Snapshot) error {
	var connectors v1alpha1.ConnectorList
	if err := r.List(ctx, &connectors, noCopy); err != nil {
		return fmt.Errorf("listing Connectors: %w", err)
	}
	for i := range connectors.Items {
		cr, err := res.connector(ctx, &connectors.Items[i])
		if err != nil {
			return err
		}
		if p := snap.Projects[cr.project]; cr.err == nil && p != nil {
			p.Connectors[cr.compiled.Key] = cr.compiled
			p.ConnectorsByAudience[cr.compiled.Audience] = cr.compiled
		}
	}
	return nil
}

// addRedirectRules merges, for each Project, the RedirectPolicies in force for it.
func addRedirectRules(ctx context.Context, r Reader, res *resolver, snap *config.Snapshot) error {
	var policies v1alpha1.RedirectPolicyList
	if err := r.List(ctx, &policies, noCopy); err != nil {
		return fmt.Errorf("listing RedirectPolicies: %w", err)
	}
	byProject := map[string][]*v1alpha1.RedirectPolicy{}
	for i := range policies.Items {
		key, err := res.policy(ctx, &policies.Items[i])
		if _, ok := asNotReady(err); err != nil && !ok {
			return err
		}
		if err == nil {
			byProject[key] = append(byProject[key], &policies.Items[i])
		}
	}
	for key, ps := range byProject {
		if p := snap.Projects[key]; p != nil {
			p.Redirects = mergeRedirectRules(p.Namespace, ps)
		}
	}
	return nil
}

func addClients(ctx context.Context, r Reader, res *resolver, snap *config.Snapshot) error {
	var clients v1alpha1.OAuthClientList
	if err := r.List(ctx, &clients, noCopy); err != nil {
		return fmt.Errorf("listing OAuthClients: %w", err)
	}
	for i := range clients.Items {
		oc := &clients.Items[i]
		sec, err := res.optionalSecret(ctx, oc.Namespace, credentialsSecretName(oc))
		if err != nil {
			return err
		}
		cr, err := res.client(ctx, oc, sec)
		if err != nil {
			if _, ok := asNotReady(err); ok {
				continue
			}
			return err
		}
		if p := snap.Projects[cr.project]; p != nil {
			p.Clients[cr.compiled.ID] = cr.compiled
		}
	}
	return nil
}
