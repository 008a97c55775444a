package sqlstore

import (
	"testing"

	"latchkey.dev/latchkey/internal/store"
)

// BenchmarkRelayAudit is the event relay's share of every audited request: records appended
// (as the token endpoint's queued records are), then relayed in rounds of 256 with no sink
// (make run's configuration: the records are read back and cleared). It reports the cost of
// relaying one record.
func BenchmarkRelayAudit(b *testing.B) {
	for _, be := range backends[:2] {
		b.Run(be.name, func(b *testing.B) {
			s := openTest(b, be.dsn(b))
			ctx := b.Context()
			const round = 256
			recs := make([]store.AuditRecord, round)
			for i := range recs {
				recs[i] = store.AuditRecord{Project: "team-a/demo", Time: bench, Actor: "client:svc", Action: "token.issued",
					Target: "svc", ClientID: "svc", Outcome: store.OutcomeSuccess, Details: map[string]string{"grant_type": "client_credentials"}}
			}
			none := func([]store.AuditRecord) ([]store.Event, error) { return nil, nil }
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += round {
				b.StopTimer()
				for i := range recs {
					if err := s.AppendAudit(ctx, recs[i]); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				n, err := s.RelayAudit(ctx, round, none)
				if err != nil || n != round {
					b.Fatalf("relayed %d: %v", n, err)
				}
			}
		})
	}
}
