// Command kubectl-latchkey is the kubectl plugin for Latchkey's admin API
// (admin.latchkey.dev; docs/admin.md): who has connected what, which agents can act for whom,
// and ending that access, with the credentials and RBAC the admin already has. It talks only
// to the kube-apiserver. On PATH (a release archive, krew, or go install; docs/binaries.md)
// kubectl finds it as `kubectl latchkey`.
//
// It is built like kubectl's own commands (cobra, and k8s.io/cli-runtime's kubeconfig flags and
// printers), so --context, --as, --token, -n, -o jsonpath=… and shell completion mean what they
// mean to kubectl.
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

// version is set at link time (-ldflags "-X main.version=…") by the release build; a plain
// `go build` reports "dev".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		var ue usageError
		if errors.Is(err, errUsage) || errors.As(err, &ue) {
			if !errors.Is(err, errUsage) {
				fmt.Fprintln(os.Stderr, "error:", err)
				fmt.Fprintln(os.Stderr, "See 'kubectl latchkey --help'.")
			}
			os.Exit(2) //nolint:gocritic // stop only unregisters the signal handler
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// errUsage is returned after the help was printed for a command line that names no command.
var errUsage = errors.New("usage")

// usageError is a command line cobra could not parse (an unknown flag, a missing value).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// run runs one command line, printing to out.
func run(ctx context.Context, args []string, out io.Writer) error {
	// Commands and completions take their context from cobra (cmd.Context()), which
	// ExecuteContext sets from ctx.
	root := newRoot(out, os.Stderr) //nolint:contextcheck // see above
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
