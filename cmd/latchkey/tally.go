package main

import (
	"context"

	"latchkey.dev/latchkey/webhook"
)

// tallyFlusher writes the token proxy's counts of the current minute when the server stops,
// so a replica that goes away loses none (webhook/proxy.Tally).
type tallyFlusher struct{ server *webhook.Server }

func (t tallyFlusher) NeedLeaderElection() bool { return false }

func (t tallyFlusher) Start(ctx context.Context) error {
	<-ctx.Done()
	t.server.Proxy().Tally().Flush(context.WithoutCancel(ctx))
	return nil
}
