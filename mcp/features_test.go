package mcp_test

import (
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/salience"
)

// testFeatures are what this package's Services run: the features syncd runs.
var testFeatures = []substrate.Feature{loom.Feature(), salience.Feature()}
