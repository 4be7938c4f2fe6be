//go:build race

package main

// raceEnabled: the race detector multiplies memory and time, so tests that
// bound those skip under it.
const raceEnabled = true
