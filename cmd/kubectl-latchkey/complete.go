package main

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
)

// Completion asks the kube-apiserver with the command line's own kubeconfig flags, so it
// offers only what that user may list; anything it cannot list (RBAC, no server) completes
// to nothing rather than failing the shell.

const completionTimeout = 5 * time.Second

// completeArgs completes the i-th positional argument with fns[i], and nothing after them.
func completeArgs(_ *options, fns ...cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) >= len(fns) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return fns[len(args)](cmd, args, toComplete)
	}
}

// listed completes with one value of each object of a resource in the namespace (or every
// namespace with -A): what pick returns for it, "" to skip it.
func listed(o *options, resource string, q url.Values, pick func(obj map[string]any, c *client) string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, err := newClient(o)
		if err != nil {
			cobra.CompDebugln(err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(commandContext(cmd), completionTimeout)
		defer cancel()
		query := c.selectors("")
		for k, v := range q {
			query[k] = v
		}
		query.Set("limit", "500")
		var l struct {
			Items []map[string]any `json:"items"`
		}
		if err := c.do(ctx, "GET", c.path(resource, "", o.allNamespaces), query, "application/json", &l); err != nil {
			cobra.CompDebugln(err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, obj := range l.Items {
			if v := pick(obj, c); v != "" && strings.HasPrefix(v, toComplete) && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
		slices.Sort(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func commandContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

func str(obj map[string]any, path ...string) string {
	var v any = obj
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

// completeEmails completes a person: their email, or their id when they have none.
func completeEmails(o *options) cobra.CompletionFunc {
	return listed(o, adminv1.ResourcePeople, nil, func(obj map[string]any, _ *client) string {
		if e := str(obj, "email"); e != "" {
			return e
		}
		return str(obj, "metadata", "name")
	})
}

// completeNames completes the names of a resource's objects.
func completeNames(o *options, resource string) cobra.CompletionFunc {
	return listed(o, resource, nil, func(obj map[string]any, _ *client) string { return str(obj, "metadata", "name") })
}

// completeGrantClients completes the clients the person named by the first argument granted.
func completeGrantClients(o *options) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, err := newClient(o)
		if err != nil || len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(commandContext(cmd), completionTimeout)
		defer cancel()
		ps, err := c.people(ctx, args[0])
		if err != nil || len(ps) != 1 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return listed(o, adminv1.ResourceGrants, c.selectors(ps[0].Name), func(obj map[string]any, _ *client) string {
			return str(obj, "clientID")
		})(cmd, args, toComplete)
	}
}

// completeTokenClients completes the clients that hold live tokens.
func completeTokenClients(o *options) cobra.CompletionFunc {
	return listed(o, adminv1.ResourceClientTokens, nil, func(obj map[string]any, _ *client) string { return str(obj, "clientID") })
}

// completeSharedConnectors completes the Organisation Connectors with a shared connection: by
// name in the namespace, as the commands take them.
func completeSharedConnectors(o *options) cobra.CompletionFunc {
	return listed(o, adminv1.ResourceSharedConnections, nil, func(obj map[string]any, c *client) string {
		connector := str(obj, "connector")
		if ns, name, ok := strings.Cut(connector, "/"); ok && ns == c.namespace {
			return name
		}
		return connector
	})
}

// registerGlobalCompletions completes -n with the namespaces the user may list, --context with
// the kubeconfig's contexts, and --project with the Projects in the namespace.
func registerGlobalCompletions(root *cobra.Command, o *options) {
	_ = root.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return names(cmd, o, "/api/v1/namespaces", toComplete)
	})
	_ = root.RegisterFlagCompletionFunc("context", func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		cfg, err := o.config.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for name := range cfg.Contexts {
			if strings.HasPrefix(name, toComplete) {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	_ = root.RegisterFlagCompletionFunc("project", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, err := newClient(o)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names(cmd, o, "/apis/latchkey.dev/v1alpha1/namespaces/"+url.PathEscape(c.namespace)+"/projects", toComplete)
	})
}

// names lists the metadata.name of the objects at a Kubernetes API path.
func names(cmd *cobra.Command, o *options, path, toComplete string) ([]string, cobra.ShellCompDirective) {
	c, err := newClient(o)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(commandContext(cmd), completionTimeout)
	defer cancel()
	var l struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := c.do(ctx, "GET", path, url.Values{"limit": {"500"}}, "application/json", &l); err != nil {
		cobra.CompDebugln(err.Error(), false)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, it := range l.Items {
		if strings.HasPrefix(it.Metadata.Name, toComplete) {
			out = append(out, it.Metadata.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
