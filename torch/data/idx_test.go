package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// idxBytes encodes an IDX file of unsigned bytes.
func idxBytes(dims []int, data []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0, 0, idxUbyte, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(data)
	return b.Bytes()
}

func gzipBytes(t *testing.T, raw []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err := zw.Write(raw)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

func writeFile(t *testing.T, dir, name string, content []byte) string {
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, content, 0o644))
	return p
}

// writeMNIST writes a tiny MNIST-format split of n 3x2 images to dir.
func writeMNIST(t *testing.T, dir, split string, n int, gz bool) {
	px := make([]byte, n*6)
	for i := range px {
		px[i] = byte(i * 7)
	}
	labels := make([]byte, n)
	for i := range labels {
		labels[i] = byte(i % 10)
	}
	images, lab := idxBytes([]int{n, 3, 2}, px), idxBytes([]int{n}, labels)
	suffix := ""
	if gz {
		images, lab, suffix = gzipBytes(t, images), gzipBytes(t, lab), ".gz"
	}
	writeFile(t, dir, split+"-images-idx3-ubyte"+suffix, images)
	writeFile(t, dir, split+"-labels-idx1-ubyte"+suffix, lab)
}

func TestReadIDXRawAndGzip(t *testing.T) {
	for _, gz := range []bool{false, true} {
		dir := t.TempDir()
		writeMNIST(t, dir, "t10k", 4, gz)
		ds, err := MNIST(dir, false)
		require.NoError(t, err)
		require.Equal(t, 4, ds.Len())
		var s Sample
		require.NoError(t, ds.Get(1, &s))
		assert.Equal(t, []int64{1, 3, 2}, s.Field(Input).Shape)
		assert.Equal(t, int64(1), Scalar[int64](&s, Label))
		assert.Equal(t, float32(42)/255, Values[float32](s.Field(Input))[0])
		assert.Equal(t, float32(77)/255, Values[float32](s.Field(Input))[5])
	}
}

func TestReadIDXErrors(t *testing.T) {
	good := idxBytes([]int{3, 2, 2}, make([]byte, 12))
	cases := []struct {
		name    string
		content []byte
		want    string
	}{
		{"empty", nil, "truncated"},
		{"wrong-magic", append([]byte{0x12, 0x34, 0x08, 0x03}, good[4:]...), "wrong magic number 0x12340803"},
		{"float-type", append([]byte{0, 0, 0x0d, 0x03}, good[4:]...), "element type 0x0d"},
		{"short-header", good[:9], "header of 3 dimensions is cut short"},
		{"short-data", good[:len(good)-5], "need 12 data bytes, file has 7"},
		{"trailing", append(bytes.Clone(good), 1), "data continues past the 12 bytes"},
		{"gz-truncated", gzipBytes(t, good)[:20], "truncated"},
		{"gz-corrupt", func() []byte {
			b := gzipBytes(t, good)
			b[len(b)-6] ^= 0xff // the CRC-32 in the trailer
			return b
		}(), "corrupt"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, dir, c.name, c.content)
			_, err := ReadIDX(p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), p)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestReadImagesCountMismatch(t *testing.T) {
	dir := t.TempDir()
	images := writeFile(t, dir, "images", idxBytes([]int{3, 2, 2}, make([]byte, 12)))
	labels := writeFile(t, dir, "labels", idxBytes([]int{2}, make([]byte, 2)))
	_, err := ReadImages(images, labels)
	require.Error(t, err)
	assert.Contains(t, err.Error(), images+" has 3 images but "+labels+" has 2 labels")

	_, err = ReadImages(labels, labels)
	require.Error(t, err)
	assert.Contains(t, err.Error(), labels+": images have 1 dimensions")
}

func TestMNISTMissingDirNamesFile(t *testing.T) {
	dir := t.TempDir()
	_, err := MNIST(dir, true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "train-images-idx3-ubyte.gz"))
}
