package serve

import (
	"path/filepath"
	"testing"
)

// FixtureModel returns the fixture's base model directory, for the external tests.
func FixtureModel(t *testing.T) string { return filepath.Join(hfFixture(t), "base") }
