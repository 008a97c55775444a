package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	adminv1 "latchkey.dev/latchkey/api/admin/v1alpha1"
)

const overview = `kubectl latchkey — see and end access to Latchkey's Projects (docs/admin.md)

Views are tables like kubectl get's; -o wide|json|yaml|name|jsonpath=…|go-template=…, and
-l narrows by label (latchkey.dev/project, latchkey.dev/person).

P is a person's email or id; CLIENT a client id or a name from the grants view. Put an ID that
starts with "-" after "--" (revoke passkey -n team-a -- -_8BYQ).

Every command takes kubectl's kubeconfig flags (--kubeconfig, --context, -n, --as, --token, …),
-A/--all-namespaces (views) and --project NAME. Shell completion: kubectl latchkey completion
bash|zsh|fish|powershell (docs/binaries.md).`

// newRoot builds the command tree. Commands print to out; cobra's own messages (help,
// completion) go to out too, its debug output to errOut.
//
//nolint:funlen // one flat list of the commands and their global flags reads better than pieces
func newRoot(out, errOut io.Writer) *cobra.Command {
	o := newOptions()
	root := &cobra.Command{
		// The executable's name: completion scripts are registered for it. Help shows the
		// display name, as kubectl's plugin convention asks.
		Use:         "kubectl-latchkey",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl latchkey"},
		Short:       "See and end access to Latchkey's Projects",
		Long:        overview,
		Version:     version,
		// Errors are printed once, by main, as kubectl prints them.
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			_ = cmd.Help()
			return errUsage
		},
		PersistentPreRunE: func(*cobra.Command, []string) error { return o.resolveOutput() },
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.SetVersionTemplate("kubectl-latchkey {{.Version}}\n")
	// No -v: to kubectl users -v is the log level.
	root.Flags().Bool("version", false, "print the plugin's version")
	o.config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "across every namespace (views; needs the right to list there)")
	root.PersistentFlags().StringVar(&o.project, "project", "", "only this Project (by name, in the namespace)")
	registerGlobalCompletions(root, o)

	root.AddGroup(&cobra.Group{ID: "views", Title: "Views:"}, &cobra.Group{ID: "actions", Title: "Actions:"})
	for _, v := range []struct {
		use, short, resource string
		aliases              []string
	}{
		{"people", "People: email, source, last sign-in, sessions", adminv1.ResourcePeople, []string{"person"}},
		{"grants", "Consents: person × client, scopes, live tokens", adminv1.ResourceGrants, []string{"grant"}},
		{"connections", "Connected accounts: connector, account, state; -o wide adds the agents that acted for the person", adminv1.ResourceConnections, []string{"connection"}},
		{"passkeys", "Passkeys: person, name, synced, last used", adminv1.ResourcePasskeys, []string{"passkey"}},
		{"links", "Open connect links", adminv1.ResourceLinks, []string{"link"}},
		{"tokens", "Live tokens per client", adminv1.ResourceClientTokens, []string{"clienttokens", "client-tokens"}},
	} {
		cmd := &cobra.Command{
			Use: v.use, Aliases: v.aliases, Short: v.short, GroupID: "views",
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := newClient(o)
				if err != nil {
					return err
				}
				return c.view(cmd.Context(), out, v.resource, args)
			},
			ValidArgsFunction: cobra.NoFileCompletions,
		}
		viewFlags(cmd, o)
		if v.resource == adminv1.ResourcePeople {
			cmd.Flags().StringVar(&o.email, "email", "", "only the people with this email")
			_ = cmd.RegisterFlagCompletionFunc("email", completeEmails(o))
		} else {
			cmd.Flags().StringVar(&o.person, "person", "", "only this person's (an email or a person id)")
			_ = cmd.RegisterFlagCompletionFunc("person", completeEmails(o))
		}
		root.AddCommand(cmd)
	}

	audit := &cobra.Command{
		Use: "audit", Short: "Audit records, oldest first (--follow keeps printing new ones)", GroupID: "views",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient(o)
			if err != nil {
				return err
			}
			return c.audit(cmd.Context(), out)
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	viewFlags(audit, o)
	audit.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing new records until interrupted")
	audit.Flags().StringVar(&o.action, "action", "", "only records of this action (docs/audit.md)")
	audit.Flags().StringVar(&o.actor, "actor", "", "only records of this actor (kubernetes:NAME, person:ID, client:ID)")
	audit.Flags().StringVar(&o.target, "target", "", "only records about this target")
	audit.Flags().DurationVar(&o.since, "since", 0, "only records of the last duration (like 30m or 2h)")
	audit.Flags().DurationVar(&o.interval, "interval", o.interval, "how often --follow asks")
	_ = audit.Flags().MarkHidden("interval")
	root.AddCommand(audit)

	root.AddCommand(revokeCommand(o, out), sharedCommand(o, out), versionCommand(out))
	// -o is a flag of several commands that share one PrintFlags: what was given is in it.
	o.print.OutputFlagSpecified = func() bool { return *o.print.OutputFormat != "" }
	return root
}

// viewFlags are the flags of a command that lists: -o and its printer flags, and -l.
func viewFlags(cmd *cobra.Command, o *options) {
	o.print.AddFlags(cmd)
	f := cmd.Flags().Lookup("output")
	f.Usage = "output format: " + strings.Join(o.allowedOutputs(), ", ") + " (default: a table)"
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return o.allowedOutputs(), cobra.ShellCompDirectiveNoFileComp
	})
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "label selector, as kubectl's -l (latchkey.dev/project=NAME, latchkey.dev/person=ID)")
}

func revokeCommand(o *options, out io.Writer) *cobra.Command {
	run := func(what string) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, err := newClient(o)
			if err != nil {
				return err
			}
			if what != "" {
				args = append([]string{what}, args...)
			}
			return c.revoke(cmd.Context(), out, args)
		}
	}
	revoke := &cobra.Command{
		Use: "revoke", Short: "End access: a person's, a grant, a connection, passkeys, a client's tokens", GroupID: "actions",
		RunE: run(""), ValidArgsFunction: cobra.NoFileCompletions,
	}
	revoke.PersistentFlags().BoolVar(&o.dryRun, "dry-run", false, "ask the server (a server-side dry run) and change nothing")
	for _, s := range []struct {
		use, short string
		aliases    []string
		complete   cobra.CompletionFunc
	}{
		{"person P", "End P's access: sessions, grants, tokens, connections, links", []string{"people"}, completeArgs(o, completeEmails(o))},
		{"grant P CLIENT | grant NAME", "Withdraw P's consent to CLIENT, with its tokens", []string{"grants"}, completeArgs(o, completeEmails(o), completeGrantClients(o))},
		{"connection ID", "Disconnect one connected account", []string{"connections"}, completeArgs(o, completeNames(o, adminv1.ResourceConnections))},
		{"passkey ID", "Remove one passkey (ID: a name from the passkeys view)", nil, completeArgs(o, completeNames(o, adminv1.ResourcePasskeys))},
		{"passkeys P", "Remove every passkey of P", nil, completeArgs(o, completeEmails(o))},
		{"client-tokens CLIENT", "Revoke every live token of CLIENT", []string{"clienttokens", "tokens"}, completeArgs(o, completeTokenClients(o))},
	} {
		name, _, _ := strings.Cut(s.use, " ")
		revoke.AddCommand(&cobra.Command{Use: s.use, Short: s.short, Aliases: s.aliases, RunE: run(name), ValidArgsFunction: s.complete})
	}
	return revoke
}

func sharedCommand(o *options, out io.Writer) *cobra.Command {
	run := func(what string) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, err := newClient(o)
			if err != nil {
				return err
			}
			if what != "" {
				args = append([]string{what}, args...)
			}
			return c.shared(cmd.Context(), out, args)
		}
	}
	shared := &cobra.Command{
		Use: "shared", Aliases: []string{"sharedconnections"}, GroupID: "actions",
		Short: "Shared accounts of Organisation Connectors (docs/shared-connections.md)",
		RunE:  run(""), ValidArgsFunction: cobra.NoFileCompletions,
	}
	viewFlags(shared, o)
	shared.PersistentFlags().BoolVar(&o.dryRun, "dry-run", false, "ask the server (a server-side dry run) and change nothing")
	list := &cobra.Command{Use: "list", Short: "Each one: connector, account, live/broken/not-connected", RunE: run("list"),
		ValidArgsFunction: cobra.NoFileCompletions}
	viewFlags(list, o)
	shared.AddCommand(list,
		&cobra.Command{Use: "connect CONNECTOR", Short: "Print a single-use start URL to open in your browser", RunE: run("connect"),
			ValidArgsFunction: completeArgs(o, completeSharedConnectors(o))},
		&cobra.Command{Use: "disconnect CONNECTOR", Short: "Disconnect it (revoked at the service where it can be)", RunE: run("disconnect"),
			ValidArgsFunction: completeArgs(o, completeSharedConnectors(o))})
	return shared
}

func versionCommand(out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Print the plugin's version", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(out, "kubectl-latchkey", version)
			return err
		},
	}
}
