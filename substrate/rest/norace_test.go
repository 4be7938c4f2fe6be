//go:build !race

package rest_test

const raceEnabled = false
