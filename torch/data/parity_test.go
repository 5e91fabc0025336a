package data

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const pySamplers = `
import json, sys, torch
from torch.utils.data import DistributedSampler, random_split
out = {"samplers": [], "splits": []}
for n, seed, epoch, rank, world, shuffle, drop in json.loads(sys.argv[1]):
    s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop)
    s.set_epoch(epoch)
    out["samplers"].append(list(s))
for n, lengths, seed in json.loads(sys.argv[2]):
    parts = random_split(range(n), lengths, generator=torch.Generator().manual_seed(seed))
    out["splits"].append([list(p.indices) for p in parts])
out["loaders"] = []
for n, bs, seed, epoch, rank, world, drop in json.loads(sys.argv[3]):
    s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=seed)
    s.set_epoch(epoch)
    dl = torch.utils.data.DataLoader(range(n), batch_size=bs, sampler=s, drop_last=bool(drop))
    out["loaders"].append([b.tolist() for b in dl])
print(json.dumps(out))
`

// samplerCase is (n, seed, epoch, rank, world size, shuffle, drop_last).
type samplerCase struct {
	N, Seed, Epoch, Rank, World int
	Shuffle, DropLast           bool
}

func (c samplerCase) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{c.N, c.Seed, c.Epoch, c.Rank, c.World, c.Shuffle, c.DropLast})
}

func TestDistributedSamplerMatchesPyTorch(t *testing.T) {
	var cases []samplerCase
	for _, n := range []int{1, 5, 10, 11, 100, 60000} {
		for _, world := range []int{1, 2, 3, 8} {
			for _, drop := range []bool{false, true} {
				for rank := range world {
					cases = append(cases, samplerCase{n, 42 + n%3, rank % 3, rank, world, true, drop})
				}
			}
		}
	}
	cases = append(cases, samplerCase{10, 0, 0, 1, 3, false, false}, samplerCase{10, 0, 0, 2, 3, false, true},
		samplerCase{3, 7, 1, 6, 8, true, false}, samplerCase{20, -5, 2, 0, 1, true, false})
	splits := [][]any{{10, []int{3, 7}, 0}, {1000, []int{500, 300, 200}, 1234}, {7, []int{7, 0}, 99}}
	caseJSON, err := json.Marshal(cases)
	require.NoError(t, err)
	splitJSON, err := json.Marshal(splits)
	require.NoError(t, err)

	loaders := [][7]int{{45, 8, 3, 0, 0, 1, 0}, {45, 8, 3, 2, 0, 1, 1}, {45, 4, 9, 1, 1, 2, 0}, {100, 7, 0, 5, 2, 3, 1}}
	loaderJSON, err := json.Marshal(loaders)
	require.NoError(t, err)

	var want struct {
		Samplers [][]int
		Splits   [][][]int
		Loaders  [][][]int
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, pySamplers, []string{"torch"}, string(caseJSON), string(splitJSON), string(loaderJSON)), &want))
	require.Len(t, want.Samplers, len(cases))
	for k, c := range cases {
		s, err := NewDistributedSampler(c.N, c.Rank, c.World, c.Shuffle, int64(c.Seed), c.DropLast)
		require.NoError(t, err)
		got := s.EpochIndices(c.Epoch)
		require.Equal(t, len(want.Samplers[k]), s.Len(), "%+v", c)
		require.Equal(t, want.Samplers[k], append([]int{}, got...), "%+v", c)
	}
	for k, sp := range splits {
		var lengths []int
		for _, l := range sp[1].([]int) {
			lengths = append(lengths, l)
		}
		parts, err := RandomSplit(synthetic(t, sp[0].(int)), lengths, int64(sp[2].(int)))
		require.NoError(t, err)
		for p := range parts {
			assert.Equal(t, want.Splits[k][p], append([]int{}, parts[p].Indices...), "split %v part %d", sp, p)
		}
	}
	// A loader's batches are PyTorch's DataLoader(batch_size, sampler=DistributedSampler(...)).
	for k, c := range loaders {
		l := mustLoader(t, synthetic(t, c[0]), LoaderOptions{BatchSize: c[1], Seed: int64(c[2]), Shuffle: true, Rank: c[4], WorldSize: c[5], DropLast: c[6] == 1, Workers: 3})
		got, err := readHost(t, l, c[3], 0)
		require.NoError(t, err)
		require.Len(t, got, len(want.Loaders[k]), "loader %v", c)
		for i, b := range got {
			assert.Equal(t, want.Loaders[k][i], b.Indices, "loader %v batch %d", c, i)
		}
	}
}

const pyFashionMNIST = `
import gzip, json, sys
import numpy as np, torch
from torchvision.transforms import functional as F
d = sys.argv[1]
out = {}
for split in ("train", "t10k"):
    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = F.to_tensor(images[0])
    n = F.normalize(x.clone(), [0.2860], [0.3530])
    out[split] = {"count": len(labels), "label": int(labels[0]), "lastlabel": int(labels[-1]),
                  "pixels": x.view(torch.int32).flatten().tolist(),
                  "normalized": n.view(torch.int32).flatten().tolist()}
print(json.dumps(out))
`

func TestFashionMNISTMatchesPython(t *testing.T) {
	if ok, _ := exists(DefaultFashionMNISTDir); !ok {
		// CI installs the data set (scripts/setup.sh on the host, scripts/chroot/trixie.sh
		// in the libtorch 2.6 chroot), so a missing one there is a broken setup, not a skip.
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing under CI=true (apt-get install dataset-fashion-mnist)", DefaultFashionMNISTDir)
		}
		t.Skipf("%s is missing (apt-get install dataset-fashion-mnist)", DefaultFashionMNISTDir)
	}
	var want map[string]struct {
		Count, Label, LastLabel int
		Pixels, Normalized      []int32
	}
	out := testpy.Run(t, pyFashionMNIST, []string{"torch", "torchvision", "numpy"}, DefaultFashionMNISTDir)
	require.NoError(t, json.Unmarshal(out, &want))
	for split, train := range map[string]bool{"train": true, "t10k": false} {
		ds, err := FashionMNIST("", train)
		require.NoError(t, err)
		w := want[split]
		require.Equal(t, w.Count, ds.Len(), split)
		var s Sample
		require.NoError(t, ds.Get(0, &s))
		assert.Equal(t, []int64{1, 28, 28}, s.Field(Input).Shape)
		assert.Equal(t, int64(w.Label), Scalar[int64](&s, Label), split)
		assert.Equal(t, w.Pixels, float32Bits(Values[float32](s.Field(Input))), split)
		require.NoError(t, Normalize{Mean: FashionMNISTMean, Std: FashionMNISTStd}.Apply(&s, nil))
		assert.Equal(t, w.Normalized, float32Bits(Values[float32](s.Field(Input))), split)
		require.NoError(t, ds.Get(ds.Len()-1, &s))
		assert.Equal(t, int64(w.LastLabel), Scalar[int64](&s, Label), split)
	}
}

func float32Bits(x []float32) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(math.Float32bits(v))
	}
	return out
}
