//go:build race

package rest_test

// raceEnabled: the race detector multiplies time several-fold and unevenly,
// so tests that compare latencies skip under it.
const raceEnabled = true
