package data

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTensorDataset(t *testing.T) {
	ds, err := NewTensorDataset([]float32{1, 2, 3, 4, 5, 6}, []int64{2}, []int64{7, 8, 9}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 3, ds.Len())
	var s Sample
	require.NoError(t, ds.Get(2, &s))
	assert.Equal(t, []float32{5, 6}, Values[float32](s.Field(Input)))
	assert.Equal(t, int64(9), Scalar[int64](&s, Label))
	assert.Empty(t, s.Field(Label).Shape, "a label is a scalar")
	assert.False(t, s.Has(Target))
	Values[float32](s.Field(Input))[0] = 0
	assert.Equal(t, float32(5), ds.Inputs[4], "Get copies")

	reg, err := NewTensorDataset([]float32{1, 2, 3, 4}, []int64{2}, nil, []float32{0.5, 1.5}, []int64{1})
	require.NoError(t, err)
	s.Reset()
	require.NoError(t, reg.Get(1, &s))
	assert.Equal(t, []float32{1.5}, Values[float32](s.Field(Target)))
	assert.Equal(t, []int64{1}, s.Field(Target).Shape)
	assert.Equal(t, []string{Input, Target}, s.Names())

	_, err = NewTensorDataset([]float32{1, 2, 3}, []int64{2}, nil, nil, nil)
	assert.ErrorContains(t, err, "3 input values do not divide into samples of shape [2]")
	_, err = NewTensorDataset([]float32{1, 2}, []int64{2}, []int64{1, 2}, nil, nil)
	assert.ErrorContains(t, err, "1 samples but 2 labels")
}

func TestRandomSplitPartitions(t *testing.T) {
	ds := synthetic(t, 30)
	parts, err := RandomSplit(ds, []int{20, 7, 3}, 42)
	require.NoError(t, err)
	var all []int
	for k, p := range parts {
		assert.Equal(t, []int{20, 7, 3}[k], p.Len())
		all = append(all, p.Indices...)
	}
	slices.Sort(all)
	for i, v := range all {
		require.Equal(t, i, v)
	}
	var a, b Sample
	require.NoError(t, parts[1].Get(2, &a))
	require.NoError(t, ds.Get(parts[1].Indices[2], &b))
	assert.Equal(t, b, a)

	_, err = RandomSplit(ds, []int{20, 9}, 42)
	assert.ErrorContains(t, err, "lengths [20 9] sum to 29, dataset has 30 samples")
}

func TestSyntheticIsDeterministicAndLabelled(t *testing.T) {
	a, b := synthetic(t, 20), synthetic(t, 20)
	var x, y Sample
	require.NoError(t, a.Get(13, &x))
	require.NoError(t, b.Get(13, &y))
	assert.Equal(t, x, y)
	assert.Equal(t, int64(3), Scalar[int64](&x, Label))
	assert.Len(t, Values[float32](x.Field(Input)), 16)
	other, err := Synthetic(20, 10, []int64{1, 4, 4}, 8)
	require.NoError(t, err)
	require.NoError(t, other.Get(13, &y))
	assert.NotEqual(t, Values[float32](x.Field(Input)), Values[float32](y.Field(Input)))
}

func TestDistributedSamplerCoversOnce(t *testing.T) {
	for _, n := range []int{0, 1, 7, 10, 13} {
		for _, world := range []int{1, 2, 3, 4} {
			for _, dropLast := range []bool{false, true} {
				count := map[int]int{}
				per := -1
				for rank := range world {
					s, err := NewDistributedSampler(n, rank, world, true, 5, dropLast)
					require.NoError(t, err)
					idx := s.EpochIndices(3)
					require.Len(t, idx, s.Len())
					if per >= 0 {
						require.Equal(t, per, len(idx), "ranks get equal shares")
					}
					per = len(idx)
					for _, i := range idx {
						count[i]++
					}
				}
				total := per * world
				if !dropLast {
					assert.GreaterOrEqual(t, total, n)
					assert.Less(t, total-n, max(world, 1))
					for i := range n {
						assert.GreaterOrEqual(t, count[i], 1, "n=%d world=%d: sample %d", n, world, i)
					}
				} else {
					assert.LessOrEqual(t, total, n)
					for i, c := range count {
						assert.Equal(t, 1, c, "n=%d world=%d: sample %d", n, world, i)
					}
				}
			}
		}
	}
	_, err := NewDistributedSampler(10, 2, 2, true, 0, false)
	assert.ErrorContains(t, err, "invalid rank 2 for world size 2")
}

func TestDistributedSamplerSetEpoch(t *testing.T) {
	s, err := NewDistributedSampler(20, 1, 2, true, 9, false)
	require.NoError(t, err)
	s.SetEpoch(4)
	assert.Equal(t, s.EpochIndices(4), s.Indices())
	assert.NotEqual(t, s.EpochIndices(5), s.Indices())
}

func TestHead(t *testing.T) {
	ds := synthetic(t, 10)
	assert.Equal(t, []int{0, 1, 2}, Head(ds, 3).Indices)
	assert.Equal(t, 10, Head(ds, 50).Len(), "n beyond the data set takes all of it")
}
