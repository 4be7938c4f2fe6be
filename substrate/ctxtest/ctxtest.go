// Package ctxtest holds the contexts tests hand the core and its callers
// to see what a long-lived caller's context is left holding: a live page,
// a collaborator or a bench client makes call after call on one context,
// and nothing a call registers on it may outlive the call.
//
// It imports nothing of the module, so the core's own tests and any
// surface's (lobby/web) share it without an import cycle, and the layout
// rules (substrate/layout_test.go) see a leaf package, not a feature.
package ctxtest

import (
	"context"
	"sync"
	"sync/atomic"
)

// Counting is a context that counts, into the counter it was made with,
// the functions registered to run when it ends (context.AfterFunc, and the
// children derived from it) and not yet run or stopped.
//
// Its own Done channel keeps the context package from registering children
// on the cancelCtx underneath, past AfterFunc: with the parent's channel,
// context.WithCancel would find that cancelCtx through Value and count
// nothing.
type Counting struct {
	context.Context
	done chan struct{}
	held *atomic.Int64
}

// NewCounting returns a context that ends when parent does and counts into
// held. Several contexts may share one counter (every request of a test
// server, say).
func NewCounting(parent context.Context, held *atomic.Int64) *Counting {
	c := &Counting{Context: parent, done: make(chan struct{}), held: held}
	go func() { <-parent.Done(); close(c.done) }()
	return c
}

func (c *Counting) Done() <-chan struct{} { return c.done }

func (c *Counting) AfterFunc(f func()) func() bool {
	c.held.Add(1)
	var once sync.Once
	settle := func() { once.Do(func() { c.held.Add(-1) }) }
	stop := context.AfterFunc(c.Context, func() { settle(); f() })
	return func() bool {
		ok := stop()
		if ok {
			settle()
		}
		return ok
	}
}
