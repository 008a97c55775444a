// Command kubectl-latchkey is the kubectl plugin for Latchkey's admin API
// (admin.latchkey.dev; docs/admin.md): who has connected what, which agents can act for whom,
// and ending that access, with the credentials and RBAC the admin already has. It talks only
// to the kube-apiserver. Install it by copying it onto PATH; kubectl finds it as
// `kubectl latchkey`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `kubectl latchkey — see and end access to Latchkey's Projects (docs/admin.md)

Views (a table like kubectl get; -o wide|json|yaml):
  kubectl latchkey people       [--email E]
  kubectl latchkey grants       [--person P]     consents: person × client, scopes, live tokens
  kubectl latchkey connections  [--person P]     connected accounts: connector, account, state
  kubectl latchkey passkeys     [--person P]     passkeys: person, name, synced, last used
  kubectl latchkey links        [--person P]     open connect links
  kubectl latchkey tokens                        live tokens per client
  kubectl latchkey audit        [--follow] [--action A] [--actor X] [--target T] [--since 1h]

Actions:
  kubectl latchkey revoke person P               end P's access: sessions, grants, tokens, connections
  kubectl latchkey revoke grant P CLIENT         withdraw P's consent to CLIENT, with its tokens
  kubectl latchkey revoke connection ID          disconnect one connected account
  kubectl latchkey revoke passkey ID             remove one passkey (ID: a name from the passkeys view)
  kubectl latchkey revoke passkeys P             remove every passkey of P
  kubectl latchkey revoke client-tokens CLIENT   revoke every live token of CLIENT

Shared accounts of Organisation Connectors (docs/shared-connections.md):
  kubectl latchkey shared                        each one: connector, account, live/broken/not-connected
  kubectl latchkey shared connect CONNECTOR      print a single-use start URL to open in your browser
  kubectl latchkey shared disconnect CONNECTOR   disconnect it (revoked at the service where it can be)

P is a person's email or id; CLIENT a client id or a name from the grants view. Put an ID that
starts with "-" after "--" (revoke passkey -n team-a -- -_8BYQ).
Flags: -n/--namespace NS, -A/--all-namespaces, --project NAME, -o FORMAT, --kubeconfig FILE,
--context NAME, --dry-run (revoke: ask the server, change nothing).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, errUsage) {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2) //nolint:gocritic // stop only unregisters the signal handler
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, out io.Writer) error {
	o, pos, err := parse(args)
	if err != nil {
		return err
	}
	if o.help || len(pos) == 0 {
		_, _ = fmt.Fprint(out, usage)
		if len(pos) == 0 && !o.help {
			return errUsage
		}
		return nil
	}
	c, err := newClient(o)
	if err != nil {
		return err
	}
	switch pos[0] {
	case "people", "person":
		return c.view(ctx, out, "people", pos[1:])
	case "grants", "grant":
		return c.view(ctx, out, "grants", pos[1:])
	case "connections", "connection":
		return c.view(ctx, out, "connections", pos[1:])
	case "passkeys", "passkey":
		return c.view(ctx, out, "passkeys", pos[1:])
	case "links", "link":
		return c.view(ctx, out, "links", pos[1:])
	case "tokens", "clienttokens", "client-tokens":
		return c.view(ctx, out, "clienttokens", pos[1:])
	case "audit":
		return c.audit(ctx, out)
	case "revoke":
		return c.revoke(ctx, out, pos[1:])
	case "shared", "sharedconnections":
		return c.shared(ctx, out, pos[1:])
	}
	return fmt.Errorf("unknown command %q (kubectl latchkey --help lists them)", pos[0])
}
