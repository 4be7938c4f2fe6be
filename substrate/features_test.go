package substrate_test

import (
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// testFeatures are what this package's Services run: the substrate tests have always run with the loom linked in (never salience).
var testFeatures = []substrate.Feature{loom.Feature()}
