package envelope

// The results of the reads beside the context read: a wait's, which
// carries the envelope, an expression's value and a help key.

import "github.com/syncsubstrate/sync/substrate/expr"

// WaitResult is what a wait returns: the context once the condition held,
// or Timeout with the context as it was (and why the condition could not
// be evaluated, when it could not).
type WaitResult[A any] struct {
	Triggered      bool           `json:"triggered"`
	Timeout        bool           `json:"timeout,omitempty"`
	Condition      string         `json:"condition"`
	ElapsedMS      int64          `json:"elapsed_ms"`
	ConditionError map[string]any `json:"condition_error,omitempty"`
	// Unmet explains, on a timeout, which clause of the condition did not
	// hold at the last evaluation and what it read.
	Unmet *expr.Explanation `json:"unmet,omitempty"`
	// Seq is the room seq the result describes.
	Seq int64 `json:"seq"`
	// Note says when the wait did not do exactly what was asked (a
	// timeout past the cap was shortened).
	Note string `json:"note,omitempty"`
	// Context is the envelope, absent with context=none.
	Context *Envelope[A] `json:"context,omitempty"`
}

// EvalResult is an expression's value, read at Seq.
//
// Fields are in reading order (a model reads the JSON): the value and why
// it is false first, the echo of the expression last.
type EvalResult struct {
	Value any `json:"value"`
	// Unmet explains a false condition: its first false clause and what
	// that clause read.
	Unmet      *expr.Explanation `json:"unmet,omitempty"`
	Seq        int64             `json:"seq"`
	Expression string            `json:"expression"`
}

// HelpResult is one help key, or (Key empty) the list of keys.
type HelpResult struct {
	Keys    []string `json:"keys,omitempty"`
	Usage   string   `json:"usage,omitempty"`
	Key     string   `json:"key,omitempty"`
	Content any      `json:"content,omitempty"`
	// Source is "room" for a room's override, "system" otherwise.
	Source  string `json:"source,omitempty"`
	Version *int64 `json:"version,omitempty"`
}
