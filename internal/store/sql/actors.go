package sqlstore

import (
	"context"
	"strings"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

// Which agents acted for a person with each connection (docs/delegation.md).

// qRecordActor inserts only for a connection that exists in the project (a connection deleted
// a moment ago is passed over); the WHERE also lets SQLite parse the upsert after a SELECT.
var qRecordActor = sqlText(`INSERT INTO connection_actors (project, connection_id, client_id, via, last_used_at)
SELECT project, id, ?, ?, ? FROM connections WHERE project = ? AND id = ?
ON CONFLICT (connection_id, client_id, via) DO UPDATE SET last_used_at =
CASE WHEN excluded.last_used_at > connection_actors.last_used_at THEN excluded.last_used_at ELSE connection_actors.last_used_at END`)

func (s *Store) RecordConnectionActor(ctx context.Context, a store.ConnectionActor) (err error) {
	defer s.observe(ctx, "RecordConnectionActor", time.Now(), &err)
	_, err = s.wexecQuiet(ctx, qRecordActor, a.ClientID, a.Via, ns(a.LastUsedAt), a.Project, a.ConnectionID)
	return err
}

// maxActorIDs bounds one ListConnectionActors query's IN list; longer lists take several.
const maxActorIDs = 500

func (s *Store) ListConnectionActors(ctx context.Context, project string, ids []string) (_ []store.ConnectionActor, err error) {
	defer s.observe(ctx, "ListConnectionActors", time.Now(), &err)
	var out []store.ConnectionActor
	for len(ids) > 0 {
		n := min(len(ids), maxActorIDs)
		query := `SELECT project, connection_id, client_id, via, last_used_at FROM connection_actors
WHERE project = ? AND connection_id IN (` + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + `)
ORDER BY connection_id, last_used_at DESC, client_id, via`
		args := make([]any, 0, n+1)
		args = append(args, project)
		for _, id := range ids[:n] {
			args = append(args, id)
		}
		rows, err := all(ctx, s.reader(), scanActor, query, args...)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		ids = ids[n:]
	}
	return out, nil
}

func scanActor(a *store.ConnectionActor) func(scanner) error {
	return func(r scanner) error {
		var at int64
		if err := r.Scan(&a.Project, &a.ConnectionID, &a.ClientID, &a.Via, &at); err != nil {
			return err
		}
		a.LastUsedAt = fromNS(at)
		return nil
	}
}
