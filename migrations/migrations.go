// Package migrations holds the numbered SQL files that define the schema.
//
// Files are named NNNN_description.sql and applied in numeric order by
// store.Migrate. A released file is never edited: add a new one instead.
package migrations

import "embed"

// FS holds every migration file, embedded in the binary.
//
//go:embed *.sql
var FS embed.FS
