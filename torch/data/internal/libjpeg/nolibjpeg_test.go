//go:build !cgo || nolibjpeg

package libjpeg

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeUnavailable(t *testing.T) {
	raw := testImage(t, 16, 16, false)
	h, err := ReadHeader(raw)
	require.NoError(t, err)
	assert.False(t, Available)
	assert.ErrorContains(t, Decode(raw, h, 3, make([]byte, 3*16*16)), "without libjpeg")
}
