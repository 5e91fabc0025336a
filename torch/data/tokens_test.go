package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pyNanoGPT writes a train.bin as nanoGPT's prepare.py does and reads windows as its
// get_batch does, at the given offsets.
const pyNanoGPT = `
import json, sys
import numpy as np, torch
path, dtype, block = sys.argv[1], sys.argv[2], int(sys.argv[3])
starts = json.loads(sys.argv[4])
rng = np.random.default_rng(0)
ids = rng.integers(0, 50257 if dtype == "uint16" else 200000, size=5000)
np.array(ids, dtype=getattr(np, dtype)).tofile(path)
data = np.memmap(path, dtype=getattr(np, dtype), mode="r")
x = torch.stack([torch.from_numpy((data[i:i+block]).astype(np.int64)) for i in starts])
y = torch.stack([torch.from_numpy((data[i+1:i+1+block]).astype(np.int64)) for i in starts])
print(json.dumps({"n": len(data), "x": x.tolist(), "y": y.tolist()}))
`

func TestTokenDatasetMatchesNanoGPT(t *testing.T) {
	for _, c := range []struct {
		dtype string
		width int
	}{{"uint16", 2}, {"uint32", 4}} {
		path := filepath.Join(t.TempDir(), "train.bin")
		const block = 64
		starts := []int{0, 64, 640, 5000 - 65 - 39}
		var want struct {
			N    int
			X, Y [][]int64
		}
		args, err := json.Marshal(starts)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(testpy.Run(t, pyNanoGPT, []string{"torch", "numpy"}, path, c.dtype, "64", string(args)), &want))
		ds, err := OpenTokens(path, block, TokenOptions{Width: c.width})
		require.NoError(t, err)
		require.Equal(t, want.N, ds.Tokens())
		assert.Equal(t, (5000-block-1)/block+1, ds.Len())
		var s Sample
		for k, start := range starts[:3] {
			require.NoError(t, ds.Get(start/block, &s))
			assert.Equal(t, want.X[k], Values[int64](s.Field(LMInputIDs)), c.dtype)
			assert.Equal(t, want.Y[k], Values[int64](s.Field(LMLabels)), c.dtype)
		}
		every, err := OpenTokens(path, block, TokenOptions{Width: c.width, Stride: 1})
		require.NoError(t, err)
		assert.Equal(t, 5000-block, every.Len(), "every window of block+1 tokens")
		require.NoError(t, every.Get(starts[3], &s))
		assert.Equal(t, want.X[3], Values[int64](s.Field(LMInputIDs)))
		assert.Equal(t, want.Y[3], Values[int64](s.Field(LMLabels)))
	}
}

func TestTextThroughByteTokenizer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "input.txt")
	text := "First Citizen:\nBefore we proceed any further, hear me speak. — ça va"
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	ds, err := OpenText(path, 8)
	require.NoError(t, err)
	var tok ByteTokenizer
	var s Sample
	require.NoError(t, ds.Get(2, &s))
	assert.Equal(t, tok.Encode(text[16:24]), Values[int64](s.Field(LMInputIDs)))
	assert.Equal(t, tok.Encode(text[17:25]), Values[int64](s.Field(LMLabels)))
	back, err := tok.Decode(tok.Encode(text))
	require.NoError(t, err)
	assert.Equal(t, text, back, "UTF-8 round-trips through bytes")
	_, err = tok.Decode([]int64{300})
	assert.ErrorContains(t, err, "token id 300 at 0 is not a byte")
	_, err = OpenText(path, len(text))
	assert.ErrorContains(t, err, "cannot fill one window")
}
