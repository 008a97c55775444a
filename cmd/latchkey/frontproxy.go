//go:build !latchkey_local

package main

import (
	"context"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/webhook/admin"
)

// frontProxyEvery is how often the front-proxy settings are read again. The kube-apiserver
// reads its --requestheader-client-ca-file when it changes and republishes the ConfigMap; a
// minute after that the admin API trusts the new CA (docs/admin.md).
const frontProxyEvery = time.Minute

// frontProxyReloader reads the front-proxy settings again every frontProxyEvery, on every
// replica, from where they came from (the file or the kube-apiserver's ConfigMap), and hands
// them to the admin server when they changed. A read that fails keeps what the server has.
type frontProxyReloader struct {
	read    func(ctx context.Context) (admin.FrontProxy, error)
	set     func(admin.FrontProxy) error
	current admin.FrontProxy
	log     logr.Logger
}

func newFrontProxyReloader(o adminOptions, cl client.Reader, srv *admin.Server, fp admin.FrontProxy, log logr.Logger) *frontProxyReloader {
	return &frontProxyReloader{
		read:    func(ctx context.Context) (admin.FrontProxy, error) { return frontProxy(ctx, o, cl) },
		set:     srv.SetFrontProxy,
		current: fp,
		log:     log.WithName("admin-front-proxy"),
	}
}

// NeedLeaderElection: every replica serves the admin API, so every replica reloads.
func (r *frontProxyReloader) NeedLeaderElection() bool { return false }

func (r *frontProxyReloader) Start(ctx context.Context) error {
	t := time.NewTicker(frontProxyEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := r.reload(ctx); err != nil {
				r.log.Error(err, "cannot read the front-proxy settings again; keeping the ones in use")
			}
		}
	}
}

// reload reads the settings and applies them if they changed, reporting whether they did.
func (r *frontProxyReloader) reload(ctx context.Context) (bool, error) {
	fp, err := r.read(ctx)
	if err != nil {
		return false, err
	}
	if sameFrontProxy(fp, r.current) {
		return false, nil
	}
	if err := r.set(fp); err != nil {
		return false, err
	}
	r.current = fp
	r.log.Info("the front-proxy settings changed; new connections and requests use them", "allowedNames", fp.AllowedNames)
	return true, nil
}

func sameFrontProxy(a, b admin.FrontProxy) bool {
	return a.ClientCA.Equal(b.ClientCA) && slices.Equal(a.AllowedNames, b.AllowedNames) &&
		slices.Equal(a.UsernameHeaders, b.UsernameHeaders) && slices.Equal(a.GroupHeaders, b.GroupHeaders)
}
