package salience_test

import (
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/salience"
)

// testFeatures are what this package's Services run: salience alone.
var testFeatures = []substrate.Feature{salience.Feature()}
