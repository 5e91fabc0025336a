package data

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gotrain/gotrain/torch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// multiField is a dataset of several dtypes: a uint8 image, variable-length int64 token
// ids (sample i has i%4+1 of them, valued 10*i+k), a bfloat16 weight and an int64 label.
type multiField struct{ n int }

func (d multiField) Len() int { return d.n }

func (d multiField) Get(i int, s *Sample) error {
	img := SetValues[uint8](s, "image", 1, 2, 2)
	for k := range img {
		img[k] = uint8(i + k)
	}
	ids := SetValues[int64](s, "input_ids", int64(i%4+1))
	for k := range ids {
		ids[k] = int64(10*i + k)
	}
	Values[uint16](s.Set("weight", torch.BFloat16, nil))[0] = bfloat16Bits(float32(i) + 0.5)
	SetScalar(s, Label, int64(i%3))
	return nil
}

func TestLoaderNamedFieldsPaddingAndMasks(t *testing.T) {
	for _, workers := range []int{0, 3} {
		l := mustLoader(t, multiField{10}, LoaderOptions{BatchSize: 4, Workers: workers, Inline: workers == 0, Pad: map[string]float64{"input_ids": -1}})
		scope := torch.NewScope()
		it := l.Iter(context.Background(), 0, 0)
		var sizes []int
		for b, ok := it.Next(); ok; b, ok = it.Next() {
			sizes = append(sizes, b.Size)
			require.Equal(t, []string{"image", "input_ids", "input_ids_mask", "label", "weight"}, b.Names())
			assert.Equal(t, torch.Uint8, b.Get("image").DType())
			assert.Equal(t, []int64{int64(b.Size), 1, 2, 2}, b.Get("image").Shape())
			assert.Equal(t, torch.BFloat16, b.Get("weight").DType())
			ids, mask := b.Get("input_ids"), b.Get("input_ids_mask")
			longest := int64(0)
			for _, i := range b.Indices {
				longest = max(longest, int64(i%4+1))
			}
			require.Equal(t, []int64{int64(b.Size), longest}, ids.Shape())
			require.Equal(t, torch.Bool, mask.DType())
			var wantIDs []int64
			var wantMask []bool
			var wantW []float64
			for _, i := range b.Indices {
				for k := range longest {
					if k < int64(i%4+1) {
						wantIDs, wantMask = append(wantIDs, int64(10*i)+k), append(wantMask, true)
					} else {
						wantIDs, wantMask = append(wantIDs, -1), append(wantMask, false)
					}
				}
				wantW = append(wantW, float64(i)+0.5)
			}
			assert.Equal(t, wantIDs, ids.Int64s())
			assert.Equal(t, wantMask, mask.Bools())
			assert.Equal(t, wantW, b.Get("weight").ToDType(torch.Float64).Float64s())
			img := b.Get("image").ToDType(torch.Int64).Int64s()
			assert.Equal(t, int64(b.Indices[0]+3), img[3])
		}
		require.NoError(t, it.Err())
		it.Close()
		scope.Close()
		assert.Equal(t, []int{4, 4, 2}, sizes)
	}
}

func TestCollateErrorsNameTheField(t *testing.T) {
	_, err := readHost(t, mustLoader(t, multiField{8}, LoaderOptions{BatchSize: 4}), 0, 0)
	assert.ErrorContains(t, err, `sample 1: field "input_ids" has shape [2], but [1] in an earlier sample of the batch; declare it in LoaderOptions.Pad`)

	missing := TransformFunc(func(s *Sample, r *rand.Rand) error {
		if r.IntN(2) == 0 {
			s.Delete("weight")
		}
		return nil
	})
	_, err = readHost(t, mustLoader(t, multiField{64}, LoaderOptions{BatchSize: 64, Transform: missing, Pad: map[string]float64{"input_ids": 0}}), 0, 0)
	assert.ErrorContains(t, err, `"weight"`)
}

func TestBatchGetNamesTheFieldsPresent(t *testing.T) {
	b := Batch{Fields: map[string]*torch.Tensor{Input: nil, Label: nil}}
	assert.True(t, b.Has(Label))
	assert.False(t, b.Has(Target))
	assert.PanicsWithValue(t, `data: batch has no field "target" (it has input, label)`, func() { b.Get(Target) })
}

func TestUserCollateAndOnDevice(t *testing.T) {
	// A collate function that adds a field of the batch's label sum and keeps the rest.
	collate := func(samples []*Sample, batch *Sample) error {
		if err := DefaultCollate(samples, batch, map[string]float64{"input_ids": 0}); err != nil {
			return err
		}
		sum := int64(0)
		for _, s := range samples {
			sum += Scalar[int64](s, Label)
		}
		SetScalar(batch, "label_sum", sum)
		return nil
	}
	var onDevice []string
	l := mustLoader(t, multiField{9}, LoaderOptions{BatchSize: 3, Workers: 2, Collate: collate, OnDevice: func(b *Batch) {
		onDevice = append(onDevice, fmt.Sprint(b.Index))
		b.Fields["image"] = NormalizeImages(b.Get("image"), []float32{0.5}, []float32{0.5})
	}})
	scope := torch.NewScope()
	defer scope.Close()
	it := l.Iter(context.Background(), 0, 0)
	defer it.Close()
	for b, ok := it.Next(); ok; b, ok = it.Next() {
		assert.Equal(t, int64(3), b.Get("label_sum").ItemInt(), "labels 0, 1, 2 in every batch")
		assert.Equal(t, b.Get("input_ids").Shape(), b.Get("input_ids_mask").Shape())
		img := b.Get("image")
		assert.Equal(t, torch.Float32, img.DType())
		assert.InDelta(t, (float64(b.Indices[0])/255-0.5)/0.5, img.Float32s()[0], 1e-6)
	}
	require.NoError(t, it.Err())
	assert.Equal(t, []string{"0", "1", "2"}, onDevice)
}

func TestHalfConversionsRoundTrip(t *testing.T) {
	for _, v := range []float32{0, -0, 1, -2.5, 65504, 6.1035156e-05, 5.9604645e-08, 0.33325195} {
		assert.Equal(t, v, float16ToFloat32(float16Bits(v)), "%v", v)
	}
	assert.Equal(t, float32(1.0009766), float16ToFloat32(float16Bits(1.0009766)))
	assert.Equal(t, float32(1), float16ToFloat32(float16Bits(1.0004)), "rounds to nearest")
	assert.Equal(t, uint16(0x3f80), bfloat16Bits(1))
}
