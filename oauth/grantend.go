// Why a grant ended: carried through one token-endpoint or revocation
// call, recorded, and told to the client and on the account page.

package oauth

import (
	"context"
)

// endKey carries a *grantEnd through one token-endpoint or revocation
// call: the storage method that learns why a grant ends (a reused refresh
// token, a replayed code) notes it, and RevokeRefreshToken records it.
type endKey struct{}

type grantEnd struct{ reason endReason }

// endReason is why a grant ended; its text is what the account page shows.
type endReason int

const (
	endNotYet endReason = iota // not known (yet)
	endReuse
	endCodeReplay
	endByClient
	endByYou
	endUnspecified
)

// text is the reason as the account page shows it (stored with the end).
func (r endReason) text() string {
	switch r {
	case endReuse:
		return "its previous refresh token was used again after the new one had been used (a copied or leaked token); the grant was revoked to be safe. Connect again."
	case endCodeReplay:
		return "its authorization code was presented twice (a copied or leaked code); the grant was revoked to be safe. Connect again."
	case endByClient:
		return "the application revoked it (you may have disconnected it there)."
	case endByYou:
		return "you revoked it on this page."
	}
	return "it was revoked."
}

// reconnect is how a person connects a client to sync again, in the
// words of the clients they use.
const reconnect = "To use sync from it again, the person connects it again: in Claude Code run /mcp, choose sync and authenticate; in Claude.ai open Settings, Connectors and connect sync; then approve the rooms on sync's consent page."

// forClient is the reason as the client's error_description says it
// (the 401 of a call, the token endpoint's refusal): the client shows it,
// or logs it, where the person reads why sync's tools went away.
func (r endReason) forClient() string {
	why := "This connection to sync was revoked."
	switch r {
	case endReuse:
		why = "sync ended this connection: a refresh token was used again after its successor had been used (a copied or leaked token), so every token of the connection was revoked."
	case endCodeReplay:
		why = "sync ended this connection: its authorization code was presented twice (a copied or leaked code), so every token of the connection was revoked."
	case endByClient:
		why = "The application ended this connection to sync (it revoked its tokens, as disconnecting does)."
	case endByYou:
		why = "This connection was revoked by its person on sync's account page (/account)."
	}
	return why + " " + reconnect
}

// reasonOf reads back a reason recorded by its text.
func reasonOf(text string) endReason {
	for r := endReuse; r <= endUnspecified; r++ {
		if r.text() == text {
			return r
		}
	}
	return endUnspecified
}

// GrantEndedError is a token refused because its grant ended: the
// error says what ended it and how to reconnect.
type GrantEndedError struct{ reason endReason }

func (e *GrantEndedError) Error() string { return e.reason.forClient() }

// Is makes it an ErrInvalidToken to callers that only check that.
func (e *GrantEndedError) Is(target error) bool { return target == ErrInvalidToken }

func withGrantEnd(ctx context.Context, reason endReason) context.Context {
	return context.WithValue(ctx, endKey{}, &grantEnd{reason: reason})
}

// revoking reports whether ctx is a revocation request's (/revoke).
func revoking(ctx context.Context) bool {
	e, ok := ctx.Value(endKey{}).(*grantEnd)
	return ok && e.reason == endByClient
}

// noteEnd keeps a reason already set: a client revoking its own old
// refresh token at /revoke ended the grant itself, whatever the token.
func noteEnd(ctx context.Context, reason endReason) {
	if e, ok := ctx.Value(endKey{}).(*grantEnd); ok && e.reason == endNotYet {
		e.reason = reason
	}
}
