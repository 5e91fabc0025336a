package tensorboard

import (
	"bytes"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCRC32C(t *testing.T) {
	// The CRC-32C check value, and the masked CRC of a zero length as in every file.
	assert.Equal(t, uint32(0xE3069283), crc32.Checksum([]byte("123456789"), castagnoli))
	rec := appendRecord(nil, make([]byte, 24))
	assert.Equal(t, []byte{0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22}, rec[:12])
}

func TestReadEventsRejectsBadProtobuf(t *testing.T) {
	file := appendRecord(nil, fileVersionEvent(1))
	// Well framed, but field 1 (wall_time) claims 5 bytes of which only one follows.
	file = appendRecord(file, []byte{0x0a, 0x05, 'a'})
	events, err := ReadEvents(bytes.NewReader(file))
	require.ErrorIs(t, err, ErrCorrupt)
	require.Len(t, events, 1)
	assert.Equal(t, FileVersion, events[0].FileVersion)
}
