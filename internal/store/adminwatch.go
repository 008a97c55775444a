package store

import "context"

// AdminWatch is what the admin API's watch and list versions read besides the listings
// (docs/decisions/0069-admin-api-list-and-watch-by-hand.md).
type AdminWatch interface {
	// AuditBounds returns the smallest and the largest audit record id of every project,
	// or 0, 0 when there is none. Ids only grow, so the largest is where the log stands;
	// records below the smallest were deleted by retention.
	AuditBounds(ctx context.Context) (first, last int64, err error)
}
