package substrate

import "github.com/syncsubstrate/sync/substrate/defs"

// The definitions of actions and views are package defs's, beneath the
// core (it needs no room to say what a valid one is); the names stay the
// core's API.
type (
	ActionDef     = defs.ActionDef
	OnInvoke      = defs.OnInvoke
	ParamSpec     = defs.ParamSpec
	WriteTemplate = defs.WriteTemplate
	ViewDef       = defs.ViewDef
	Timer         = defs.Timer
)
