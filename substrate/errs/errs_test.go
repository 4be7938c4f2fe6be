package errs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
)

// pgError is the shape of pgx's *pgconn.PgError that From duck-types.
type pgError struct{ code, msg string }

func (e *pgError) Error() string    { return e.msg + " (SQLSTATE " + e.code + ")" }
func (e *pgError) SQLState() string { return e.code }

type connectError struct{}

func (connectError) Error() string     { return "failed to connect: dial tcp: connection refused" }
func (connectError) SafeToRetry() bool { return true }

// A database that cannot be reached is a 503 unavailable, a failing
// statement a 500; on Citus a worker the coordinator lost (SQLSTATE
// XX000 with Citus's words for it, or class 08) is unavailable too. The
// hint says nothing was applied only when the database was never
// reached: a connection lost mid-request may have been lost during the
// commit, and the hint says how to find out.
func TestFromUnavailable(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		code   Code
		before bool
	}{
		{"no slot", &pgError{"53300", "sorry, too many clients already"}, Unavailable, true},
		{"starting", &pgError{"57P03", "the database system is starting up"}, Unavailable, true},
		{"connect refused", fmt.Errorf("store: %w", connectError{}), Unavailable, true},
		{"shutdown", &pgError{"57P01", "terminating connection due to administrator command"}, Unavailable, false},
		{"citus 08006", &pgError{"08006", "connection to the remote node sync@127.0.0.1:9702 failed with the following error: connection not open"}, Unavailable, false},
		{"citus essential", fmt.Errorf("commit: %w", &pgError{"XX000", "failure on connection marked as essential: 127.0.0.1:9702"}), Unavailable, false},
		{"citus remote", &pgError{"XX000", "connection to the remote node sync@127.0.0.1:9702 failed with the following error: Connection refused"}, Unavailable, false},
		{"citus no connections", &pgError{"XX000", "could not establish any connections to the node 127.0.0.1:9702 after 5000 ms"}, Unavailable, false},
		{"citus worker gone mid-statement", &pgError{"XX000", "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n\tbefore or while processing the request."}, Unavailable, false},
		{"citus worker reset", &pgError{"XX000", "could not receive data from server: Connection reset by peer"}, Unavailable, false},
		{"dropped", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), Unavailable, false},
		{"net", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, Unavailable, false},
		{"other internal", &pgError{"XX000", "cache lookup failed for relation 1234"}, Internal, false},
		{"statement", &pgError{"23505", "duplicate key value violates unique constraint"}, Internal, false},
		{"plain", errors.New("boom"), Internal, false},
	} {
		e := From(c.err)
		if e.Code != c.code {
			t.Errorf("%s: %s, want %s", c.name, e.Code, c.code)
			continue
		}
		if c.code != Unavailable {
			continue
		}
		if e.Code.Status() != 503 {
			t.Errorf("%s: status %d", c.name, e.Code.Status())
		}
		nothing := strings.Contains(e.Hint, "nothing of this request was applied")
		if nothing != c.before {
			t.Errorf("%s: hint %q: claims nothing applied %v, want %v", c.name, e.Hint, nothing, c.before)
		}
		if !c.before && !strings.Contains(e.Hint, "may or may not") {
			t.Errorf("%s: hint %q does not say the outcome is unknown", c.name, e.Hint)
		}
	}
}
