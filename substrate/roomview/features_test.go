package roomview_test

import (
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// testFeatures are what this package's Services run: the loom alone.
var testFeatures = []substrate.Feature{loom.Feature()}
