//go:build !latchkey_local

package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	k8sevents "k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"latchkey.dev/latchkey/api/v1alpha1"
	"latchkey.dev/latchkey/internal/events"
)

// SecurityEventInterval is how often security events are summed up into Kubernetes Events:
// at most one Event per Project and event type per interval, however many happened.
const SecurityEventInterval = time.Minute

// Event reasons of security events on a Project, one per type.
const (
	SecurityLinkWrongPersonReason        = "LinkOpenedByAnotherPerson"
	SecurityRefreshReuseReason           = "RefreshTokenReused"
	SecurityConsentRefusedByPolicyReason = "ConsentRefusedByPolicy"
	SecurityCallbackConfirmationReason   = "CallbackNeededConfirmation"
	SecurityCallbackOtherPersonReason    = "CallbackRefusedForAnotherPerson"
)

var securityReasons = map[string]string{
	events.LinkWrongPerson:        SecurityLinkWrongPersonReason,
	events.RefreshReuse:           SecurityRefreshReuseReason,
	events.ConsentRefusedByPolicy: SecurityConsentRefusedByPolicyReason,
	events.CallbackConfirmation:   SecurityCallbackConfirmationReason,
	events.CallbackOtherPerson:    SecurityCallbackOtherPersonReason,
}

// SetupSecurityEvents adds the leader-elected runnable that turns security events from the
// audit log into Warning Events on their Project. HTTP handlers only write the store; this is
// the one place those moments reach the Kubernetes API, summed per Project and type, so a flood
// of refusals costs the API server one Event per minute per type.
func SetupSecurityEvents(mgr ctrl.Manager, st events.AuditReader) error {
	if st == nil {
		return errors.New("controllers: SetupSecurityEvents needs a store")
	}
	return mgr.Add(&securityEvents{
		client:   mgr.GetClient(),
		recorder: mgr.GetEventRecorder("latchkey"),
		tail:     &events.Tail{Store: st},
		every:    SecurityEventInterval,
		now:      time.Now,
		log:      mgr.GetLogger().WithName("security-events"),
	})
}

type securityEvents struct {
	client   client.Reader
	recorder k8sevents.EventRecorder
	tail     *events.Tail
	every    time.Duration
	now      func() time.Time
	log      logr.Logger
}

// NeedLeaderElection: one replica tails, so each event is reported once.
func (s *securityEvents) NeedLeaderElection() bool { return true }

func (s *securityEvents) Start(ctx context.Context) error {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		if err := s.round(ctx); err != nil && ctx.Err() == nil {
			s.log.Error(err, "cannot report security events")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// round reports what was appended since the last round.
func (s *securityEvents) round(ctx context.Context) error {
	sums, err := s.tail.Next(ctx, s.now())
	if err != nil {
		return err
	}
	var errs []error
	for _, sum := range sums {
		ns, name, ok := strings.Cut(sum.Project, "/")
		if !ok {
			continue
		}
		var p v1alpha1.Project
		if err := s.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("reading Project %s: %w", sum.Project, err))
			}
			continue
		}
		s.recorder.Eventf(&p, nil, corev1.EventTypeWarning, securityReasons[sum.Type], "SecurityEvent", "%s", securityNote(sum))
	}
	return errors.Join(errs...)
}

func securityNote(s events.Summary) string {
	what := map[string]string{
		events.LinkWrongPerson:        "connect link opened by someone signed in as another person",
		events.RefreshReuse:           "retired refresh token presented again; the client's tokens for the person were ended",
		events.ConsentRefusedByPolicy: "consent refused by the redirect policy",
		events.CallbackConfirmation:   "connection callback arrived in another browser and stopped at confirmation",
		events.CallbackOtherPerson:    "connection callback arrived in a browser signed in as another person and was refused",
	}[s.Type]
	times := "1 time"
	if s.Count != 1 {
		times = fmt.Sprintf("%d times", s.Count)
	}
	return fmt.Sprintf("%s: %s, %s between %s and %s (latest by %s); see the audit log or the event sinks for each one",
		s.Type, what, times, s.First.UTC().Format(time.RFC3339), s.Last.UTC().Format(time.RFC3339), s.LastActor)
}
