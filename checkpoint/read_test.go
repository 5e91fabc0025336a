package checkpoint

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadTorchFiles reads the committed files written by the pinned torch (see
// testdata/interop.py) and compares them exactly with torch.load's view of them.
func TestReadTorchFiles(t *testing.T) {
	requireReadsExactly(t, "testdata")
}

// TestRoundTrip writes what was read and reads it back.
func TestRoundTrip(t *testing.T) {
	for name, v := range requireReadsExactly(t, "testdata") {
		var buf bytes.Buffer
		require.NoError(t, WriteTo(&buf, v), name)
		back, err := ReadFrom(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
		require.NoError(t, err, name)
		require.Equal(t, describeValue(v), describeValue(back), name)
	}
}
