package defs_test

import (
	"encoding/json"
	"maps"
	"reflect"
	"testing"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// A key is contested when two or more actions write it by a static name;
// a reader is shown only the contest among the actions it is shown.
func TestContested(t *testing.T) {
	w := func(key string) defs.WriteTemplate {
		return defs.WriteTemplate{Key: key, Value: json.RawMessage(`1`)}
	}
	room := map[string]*defs.ActionDef{
		"claim": {ID: "claim", Writes: []defs.WriteTemplate{w("task"), w("task"), w("log")}},
		"zap":   {ID: "zap", Writes: []defs.WriteTemplate{w("task"), w("${params.k}")}},
		"drop":  {ID: "drop", Writes: []defs.WriteTemplate{w("task"), w("log")}},
		"solo":  {ID: "solo", Writes: []defs.WriteTemplate{w("mine")}},
	}
	all := defs.Contested(maps.All(room))
	want := map[string]any{"_shared.task": []any{"claim", "drop", "zap"}, "_shared.log": []any{"claim", "drop"}}
	if !reflect.DeepEqual(all, want) {
		t.Fatalf("contested %v, want %v", all, want)
	}
	shown := defs.ContestedAmong(all, func(id string) bool { return id != "drop" })
	if want := (map[string]any{"_shared.task": []any{"claim", "zap"}}); !reflect.DeepEqual(shown, want) {
		t.Fatalf("as shown %v, want %v", shown, want)
	}
}
