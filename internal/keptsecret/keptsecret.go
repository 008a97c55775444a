// Package keptsecret holds what every Secret the operator keeps for itself has in common (the
// keys Secret, internal/keys; the admin API's serving certificate, internal/admincert): the
// elected replica creates it once and looks after it on a tick, and every replica follows it by
// reading it again. Creating is create-only, so replicas racing to create it leave exactly one
// and a Secret that already exists is never replaced.
package keptsecret

import (
	"context"
	"maps"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels are the labels of a Secret the operator keeps, component naming which: managed by
// Latchkey, which the chart's admission policy requires of every Secret Latchkey writes, and
// latchkey.dev/use=latchkey (v1alpha1.SecretUseLabel), which every Secret Latchkey creates
// carries and which lets no Connector use it (docs/decisions/0051).
func Labels(component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/managed-by": "latchkey",
		"app.kubernetes.io/component":  component,
		"latchkey.dev/use":             "latchkey",
	}
}

// Mark puts Labels on sec before it is written again, so one an administrator made by hand, or
// an earlier version made, is admitted too. Other labels stay.
func Mark(sec *corev1.Secret, component string) {
	if sec.Labels == nil {
		sec.Labels = map[string]string{}
	}
	maps.Copy(sec.Labels, Labels(component))
}

// Create creates sec. It reports false, and no error, when the Secret already exists: someone
// else (another replica, an administrator) made it first, and theirs is the one to use.
func Create(ctx context.Context, c client.Client, sec *corev1.Secret) (bool, error) {
	err := c.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	return err == nil, err
}

// Keep runs step every tick until ctx ends; a failed step is logged with what and tried again
// within ten seconds. It is the elected replica's loop.
func Keep(ctx context.Context, tick time.Duration, step func(context.Context) error, log logr.Logger, what string) {
	if tick <= 0 {
		tick = time.Minute
	}
	for {
		wait := tick
		if err := step(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "keeping "+what+" failed; trying again")
			wait = min(tick, 10*time.Second)
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// Follow runs load every poll until ctx ends, every second while loaded says nothing usable is
// loaded yet (a replica waiting to serve checks often). A missing Secret is logged once, with
// waiting; other errors are logged each time and leave what was loaded in use.
func Follow(ctx context.Context, poll time.Duration, load func(context.Context) error, loaded func() bool,
	log logr.Logger, what, waiting string) {
	if poll <= 0 {
		poll = 10 * time.Second
	}
	saidWaiting := false
	for {
		err := load(ctx)
		switch {
		case apierrors.IsNotFound(err):
			if !saidWaiting {
				log.Info(waiting)
				saidWaiting = true
			}
		case err != nil && ctx.Err() == nil:
			log.Error(err, "reading "+what+" failed; keeping what is already loaded")
		}
		wait := poll
		if !loaded() {
			wait = min(poll, time.Second)
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
