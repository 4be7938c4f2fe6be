package defs_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// A registration is warned of the static keys other actions write too
// (named in id order, itself left out) and of writes its authority would
// always refuse; templated scopes and self are never warned of.
func TestActionWarnings(t *testing.T) {
	w := func(scope, key string) defs.WriteTemplate {
		return defs.WriteTemplate{Scope: scope, Key: key, Value: json.RawMessage(`1`)}
	}
	def := &defs.ActionDef{ID: "claim", Scope: "_shared", Writes: []defs.WriteTemplate{
		w("_shared", "task"), w("bob", "k"), w("${params.who}", "k"), w("self", "k")}}
	room := map[string]*defs.ActionDef{
		"claim": def,
		"zap":   {ID: "zap", Writes: []defs.WriteTemplate{w("_shared", "task")}},
		"drop":  {ID: "drop", Writes: []defs.WriteTemplate{w("_shared", "task")}},
		"other": {ID: "other", Writes: []defs.WriteTemplate{w("_shared", "else")}},
	}
	may := func(scope string) error {
		if scope == "_shared" {
			return nil
		}
		return errors.New("refused")
	}
	got := defs.ActionWarnings(def, maps.All(room), may)
	if len(got) != 2 || got[0]["warning"] != "competing_write_targets" || got[0]["target"] != "_shared.task" ||
		!slices.Equal(got[0]["actions"].([]string), []string{"drop", "zap"}) ||
		got[1]["warning"] != "write_scope_denied" || got[1]["scope"] != "bob" || got[1]["write"] != 1 {
		t.Fatalf("warnings %v", got)
	}
}
