package write

import (
	"encoding/json"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The JSON a request hands the core beside its writes: a room's or an
// agent's meta and an invocation's params, held to the same limits as a
// stored value before anything is read or written.

// Meta checks an optional JSON object (a room's or an agent's meta, sent
// as field) against maxBytes and lim's depth, and returns it ("{}" when
// absent).
func Meta(field string, raw json.RawMessage, maxBytes int, lim Limits) ([]byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return []byte("{}"), nil
	}
	if raw[0] != '{' {
		return nil, errs.New(errs.InvalidField, "%s must be a JSON object", field).WithHint(`send an object such as {"label": "…"}`)
	}
	if len(raw) > maxBytes {
		return nil, errs.New(errs.ValueTooLarge, "%s is %d bytes, over the limit of %d", field, len(raw), maxBytes).
			WithHint("keep %s small; put data in state instead", field)
	}
	if Depth(raw, lim.MaxValueDepth) > lim.MaxValueDepth {
		return nil, TooDeep(lim, field).With("field", field)
	}
	return raw, nil
}

// Params reads an invocation's params object: a value like any other, so
// no deeper than lim.MaxValueDepth (the object itself is one level).
// Numbers stay json.Number, as an invocation binds them.
func Params(raw json.RawMessage, lim Limits) (map[string]any, error) {
	params := map[string]any{}
	if len(raw) == 0 || string(raw) == "null" {
		return params, nil
	}
	if err := CheckJSONText(raw); err != nil {
		return nil, err.(*errs.Error).With("field", "params")
	}
	if Depth(raw, lim.MaxValueDepth) > lim.MaxValueDepth {
		return nil, TooDeep(lim, "params").With("field", "params")
	}
	if err := defs.DecodeNumber(raw, &params); err != nil || params == nil {
		return nil, errs.New(errs.InvalidParam, "params must be a JSON object").WithHint(`params is an object: {"name": value, …}`)
	}
	return params, nil
}
