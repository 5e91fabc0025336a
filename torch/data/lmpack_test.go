package data_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
)

// TestLMSeparateDocuments: with SeparateDocuments, packed windows carry position_ids
// that restart at each document and at each window, and the first token of each
// document (but the window's first, whose label the loss never reads) is not learned
// from the one before; batches carry the positions.
func TestLMSeparateDocuments(t *testing.T) {
	tok := tinyTokenizer(t)
	docs := []string{"hello world", "hello", "world hello world", "hello hello", "world"}
	var stream []int64
	var start []bool
	for _, d := range docs {
		ids := append(tok.Encode(d, true), 2)
		for j := range ids {
			start = append(start, j == 0)
		}
		stream = append(stream, ids...)
	}
	const block = 5
	ds, err := data.NewLMDataset(writeFile(t, "docs.txt", strings.Join(docs, "\n")), tok,
		data.LMOptions{BlockSize: block, EOS: 2, SeparateDocuments: true})
	require.NoError(t, err)
	require.Equal(t, len(stream)/block, ds.Len())
	for i := range ds.Len() {
		var s data.Sample
		require.NoError(t, ds.Get(i, &s))
		ids := stream[i*block : (i+1)*block]
		wantLabels := append([]int64{}, ids...)
		wantPos := make([]int64, block)
		for j := range block {
			switch {
			case j == 0:
			case start[i*block+j]:
				wantLabels[j] = data.IgnoreIndex
			default:
				wantPos[j] = wantPos[j-1] + 1
			}
		}
		assert.Equal(t, ids, data.Values[int64](s.MustField(data.LMInputIDs)), "window %d", i)
		assert.Equal(t, wantLabels, data.Values[int64](s.MustField(data.LMLabels)), "window %d", i)
		assert.Equal(t, wantPos, data.Values[int64](s.MustField(data.LMPositionIDs)), "window %d", i)
	}

	l, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: 2, Pad: data.LMPad(0), Inline: true})
	require.NoError(t, err)
	torch.WithScope(func() {
		it := l.Iter(context.Background(), 0, 0)
		defer it.Close()
		b, ok := it.Next()
		require.True(t, ok)
		assert.Equal(t, b.Get(data.LMInputIDs).Shape(), b.Get(data.LMPositionIDs).Shape())
	})

	// Without the option, windows are as before: no positions.
	ds, err = data.NewLMDataset(writeFile(t, "docs.txt", strings.Join(docs, "\n")), tok, data.LMOptions{BlockSize: block, EOS: 2})
	require.NoError(t, err)
	var s data.Sample
	require.NoError(t, ds.Get(1, &s))
	assert.Nil(t, s.Field(data.LMPositionIDs))
}
