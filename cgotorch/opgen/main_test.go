package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGeneratedFilesAreCurrent fails when a committed generated file differs from what
// ops.tab generates: run `go generate ./cgotorch` and commit the result.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files := generateFrom(t, opsTable(t))
	for path, want := range files {
		got, err := os.ReadFile(path)
		require.NoError(t, err, "%s is missing: run go generate ./cgotorch", path)
		require.True(t, string(got) == string(want), "%s is stale: run go generate ./cgotorch and commit it", path)
	}
}

// opsTable is the committed ../ops.tab.
func opsTable(t *testing.T) []byte {
	t.Helper()
	table, err := os.ReadFile("../ops.tab")
	require.NoError(t, err)
	return table
}

// generateFrom generates the four files from table as `go generate ./cgotorch` does
// from ../ops.tab, keyed by the paths they are written to.
func generateFrom(t *testing.T, table []byte) map[string][]byte {
	t.Helper()
	files, err := generate(table, "../ops.tab", "..", "../../torch")
	require.NoError(t, err)
	require.Len(t, files, 4)
	return files
}

func TestParseRejectsBadRows(t *testing.T) {
	for _, tc := range []struct{ row, want string }{
		{"A | a | self | tensor | x", "want 6 fields"},
		{"A | a | self, n float | tensor | x | doc.", "unknown kind"},
		{"A | a | self | tensor3 | x | doc.", "unknown result"},
		{"A | a | self, s int64s..., n int64 | tensor | x | doc.", "variadic"},
		{"A | a | self | tensor | x | doc.\nA | a | self | tensor | x | doc.", "already declared on line 1"},
	} {
		_, err := parse([]byte(tc.row), "t.tab")
		require.Error(t, err, tc.row)
		require.True(t, strings.Contains(err.Error(), tc.want), "%q: %v", tc.row, err)
	}
}
