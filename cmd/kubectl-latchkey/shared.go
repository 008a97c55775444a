package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
)

// shared is `kubectl latchkey shared [connect|disconnect CONNECTOR]`: the Organisation
// Connectors' shared accounts (docs/shared-connections.md). Without a subcommand it lists
// them.
func (c *client) shared(ctx context.Context, out io.Writer, args []string) error {
	if len(args) == 0 || args[0] == "list" {
		if len(args) > 0 {
			args = args[1:]
		}
		return c.view(ctx, out, adminv1.ResourceSharedConnections, args)
	}
	if len(args) != 2 {
		return errors.New("shared connect CONNECTOR | shared disconnect CONNECTOR (CONNECTOR: name in the namespace, or namespace/name)")
	}
	if c.o.allNamespaces {
		return errors.New("shared connections are in their Project's namespace: use -n, not -A")
	}
	name := c.sharedName(args[1])
	switch args[0] {
	case "connect":
		return c.connectShared(ctx, out, name)
	case "disconnect":
		q := url.Values{}
		if c.o.dryRun {
			q.Set("dryRun", "All")
		}
		var st metav1.Status
		if err := c.do(ctx, "DELETE", c.path(adminv1.ResourceSharedConnections, name, false), q, "application/json", &st); err != nil {
			return err
		}
		what := "shared connection " + name + " disconnected"
		if c.o.dryRun {
			what += " (server dry run)"
		}
		if st.Message != "" {
			what += ": " + st.Message
		}
		_, err := fmt.Fprintln(out, what)
		return err
	}
	return fmt.Errorf("shared %q: want connect, disconnect or list", args[0])
}

// sharedName is the object name of a Connector's shared connection: the Connector named
// "name" (in the namespace) or "namespace/name".
func (c *client) sharedName(connector string) string {
	if ns, name, ok := strings.Cut(connector, "/"); ok {
		return adminv1.SharedConnectionName(ns, name)
	}
	if strings.Contains(connector, ".") {
		return connector // already an object name from the list
	}
	return adminv1.SharedConnectionName(c.namespace, connector)
}

// connectShared creates the shared connection and prints its start URL, which the
// administrator opens in their browser.
func (c *client) connectShared(ctx context.Context, out io.Writer, name string) error {
	body, err := json.Marshal(adminv1.SharedConnection{
		TypeMeta:   metav1.TypeMeta{Kind: "SharedConnection", APIVersion: adminv1.GroupVersion},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace},
	})
	if err != nil {
		return err
	}
	var q url.Values
	if c.o.dryRun {
		q = url.Values{"dryRun": {"All"}}
	}
	var sc adminv1.SharedConnection
	if err := c.send(ctx, http.MethodPost, c.path(adminv1.ResourceSharedConnections, "", false), q, "application/json", body, &sc); err != nil {
		return err
	}
	if c.o.dryRun {
		_, err = fmt.Fprintf(out, "shared connection %s (%s) may be connected (server dry run)\n", name, sc.State)
		return err
	}
	exp := ""
	if sc.StartExpiresAt != nil {
		exp = " before " + sc.StartExpiresAt.UTC().Format(time.RFC3339)
	}
	_, err = fmt.Fprintf(out, "Open this address in your browser, once,%s, and sign in at the service with the account to share (not your own):\n%s\n",
		exp, sc.StartURL)
	return err
}
