package authority

import "github.com/syncsubstrate/sync/substrate/errs"

// ReadsAuditLog refuses p unless it is room authority of roomID: the
// audit log records every scope a mutation wrote, private ones included,
// so no narrower credential reads it whole.
func ReadsAuditLog(p *Principal, roomID string) error {
	if p == nil || p.RoomID != roomID || !p.Admin() {
		return errs.New(errs.Forbidden, "the audit log holds every scope, private ones included: only the room token reads it").
			WithHint("read it with the room token")
	}
	return nil
}
