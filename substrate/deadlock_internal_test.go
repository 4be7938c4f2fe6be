package substrate

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A status statement chosen as a deadlock's victim is run again (it
// changed nothing); any other failure, or a third deadlock, is returned.
func TestAgainOnDeadlock(t *testing.T) {
	deadlock := &pgconn.PgError{Code: "40P01", Message: "deadlock detected"}
	other := &pgconn.PgError{Code: "23505", Message: "duplicate key"}
	for _, c := range []struct {
		name  string
		fails []error // what each run returns, in order; nil: success
		runs  int
		err   error
	}{
		{"success", []error{nil}, 1, nil},
		{"a victim once, then done", []error{deadlock, nil}, 2, nil},
		{"a victim twice, then done", []error{deadlock, deadlock, nil}, 3, nil},
		{"a victim three times: given up", []error{deadlock, deadlock, deadlock, nil}, 3, deadlock},
		{"another error is not retried", []error{other, nil}, 1, other},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := 0
			err := againOnDeadlock(func() error { runs++; return c.fails[runs-1] })
			if runs != c.runs || !errors.Is(err, c.err) {
				t.Fatalf("%d runs, err %v; want %d runs, err %v", runs, err, c.runs, c.err)
			}
		})
	}
}
