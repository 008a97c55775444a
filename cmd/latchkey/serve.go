package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"latchkey.dev/latchkey/controllers"
	"latchkey.dev/latchkey/controllers/configdir"
)

// localOptions are the flags of the no-cluster mode, `latchkey serve --config-dir DIR`
// (docs/no-cluster.md): the four kinds and their Secrets come from a directory of YAML files
// instead of the Kubernetes API, with the same admission and the same compiler.
type localOptions struct {
	serve     bool // the `serve` subcommand was given
	configDir string
	dataDir   string
	namespace string
	poll      time.Duration
}

func (l *localOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&l.configDir, "config-dir", "",
		"no-cluster mode: read Projects, OAuthClients, RedirectPolicies, Connectors and their Secrets from the YAML files in this directory "+
			"instead of the Kubernetes API, and watch it for changes (`latchkey serve --config-dir DIR`; docs/no-cluster.md)")
	fs.StringVar(&l.dataDir, "data-dir", ".latchkey",
		"no-cluster mode: where object identities, OAuthClient credentials, status files and (unless --database says otherwise) the SQLite database and sealing keys are kept")
	fs.StringVar(&l.namespace, "config-namespace", "default",
		"no-cluster mode: the namespace of objects whose metadata.namespace is empty")
	fs.DurationVar(&l.poll, "config-poll", time.Second, "no-cluster mode: how often the configuration directory is looked at for changes")
}

func (l *localOptions) enabled() bool { return l.configDir != "" }

// check refuses flags that need a cluster, and points the default database into the data
// directory.
func (l *localOptions) check(fs *flag.FlagSet, o *options) error {
	if l.serve && l.configDir == "" {
		return errors.New("serve: --config-dir is required (a directory of Project, OAuthClient, RedirectPolicy, Connector and Secret YAML files)")
	}
	if !l.enabled() {
		return nil
	}
	for _, name := range []string{"kubeconfig", "leader-elect", "leader-election-namespace", "watch-namespaces"} {
		if flagSet(fs, name) {
			return fmt.Errorf("--%s needs a cluster; --config-dir runs without one", name)
		}
	}
	if !flagSet(fs, "database") && o.database == defaultDatabase {
		o.database = "sqlite:" + filepath.Join(l.dataDir, "latchkey.db")
	}
	return nil
}

// setup adds the configuration directory's reader to the group: Standalone runs the
// reconcilers' status phases and the compiler on what configdir reads.
func (l *localOptions) setup(h host, copts controllers.Options, log logr.Logger) error {
	sa, err := controllers.NewStandalone(copts, log.WithName("controllers"))
	if err != nil {
		return err
	}
	src, err := configdir.New(configdir.Options{
		Dir:        l.configDir,
		DataDir:    l.dataDir,
		Namespace:  l.namespace,
		Poll:       l.poll,
		Standalone: sa,
		Clock:      copts.Clock,
		Logger:     log.WithName("configdir"),
	})
	if err != nil {
		return err
	}
	return h.Add(runnableFunc(src.Run))
}

// group runs a set of runnables until the context ends or one of them fails; it stands in for
// the controller manager when there is no cluster (no leader election: one process serves).
type group struct {
	runnables []runnable
}

func (g *group) Add(r runnable) error {
	g.runnables = append(g.runnables, r)
	return nil
}

// Start runs every runnable and waits for all of them. The first error stops the others and is
// returned.
func (g *group) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, r := range g.runnables {
		wg.Go(func() {
			if err := r.Start(ctx); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}

// runnableFunc is a function as a runnable.
type runnableFunc func(context.Context) error

func (f runnableFunc) Start(ctx context.Context) error { return f(ctx) }
