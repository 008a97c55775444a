package sqlstore

import (
	"context"
	"time"

	"latchkey.dev/latchkey/internal/store"
)

var qLinkByID = sqlText(`SELECT ` + linkCols + ` FROM links WHERE id = ?`)

// GetLink returns a link by id whatever its state or expiry.
func (s *Store) GetLink(ctx context.Context, id string) (_ store.Link, err error) {
	defer s.observe(ctx, "GetLink", time.Now(), &err)
	var l store.Link
	err = s.reader().row(ctx, scanLink(&l), qLinkByID, id)
	return l, err
}
