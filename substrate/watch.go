package substrate

import "context"

// Watch signals changes to a room the principal may read: a value on the
// returned channel after each commit, presence change or deletion
// (coalesced: several may arrive as one), from this process or another
// (the hub's LISTEN). It is what a live page is fed by, as waits are; stop
// ends it and must be called.
func (s *Service) Watch(ctx context.Context, p *Principal, roomID string) (changes <-chan struct{}, stop func(), err error) {
	return s.watch(ctx, p, roomID, true)
}

// WatchCommits is Watch without presence-only changes (an agent's status
// or heartbeat, which commit nothing): for a watcher that reads no
// presence, which would otherwise read again on every heartbeat in the
// room (the loom's collaborator).
func (s *Service) WatchCommits(ctx context.Context, p *Principal, roomID string) (changes <-chan struct{}, stop func(), err error) {
	return s.watch(ctx, p, roomID, false)
}

func (s *Service) watch(ctx context.Context, p *Principal, roomID string, presence bool) (changes <-chan struct{}, stop func(), err error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, nil, err
	}
	sub, err := s.hub.Subscribe(ctx, roomID, presence)
	if err != nil {
		return nil, nil, err
	}
	return sub.C, sub.Close, nil
}
