package data_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/tokenizer/chat"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// packConversations are conversations of different lengths (one cut to the block of
// 96 tokens, one dropped), for the packing tests.
func packConversations(t *testing.T) string {
	t.Helper()
	lines := []string{
		conv("user", "hi", "assistant", "hello!"),
		conv("system", "be brief", "user", "2+2?", "assistant", "4", "user", "3+3?", "assistant", "6"),
		conv("user", "name?", "assistant", "gotrain"),
		conv("user", "a", "assistant", "b", "user", strings.Repeat("c", 60), "assistant", "d"), // cut
		conv("user", strings.Repeat("e", 90), "assistant", "f"),                                // dropped
		conv("user", "x", "assistant", "y"),
		conv("user", "long one", "assistant", strings.Repeat("z", 30)),
	}
	return writeFile(t, "chat.jsonl", strings.Join(lines, "\n")+"\n")
}

// TestChatDatasetPacking: packed windows hold whole conversations (each once, at most
// the block), with their ids and labels, the first label of each IgnoreIndex, and
// position_ids restarting at each; fewer windows than conversations; the summary says
// how full they are.
func TestChatDatasetPacking(t *testing.T) {
	tok, tmpl := chatSetup(t)
	path := packConversations(t)
	o := data.ChatOptions{BlockSize: 96, Template: chat.Options{Now: pinned}}
	plain, err := data.NewChatDataset(path, tok, tmpl, o)
	require.NoError(t, err)
	o.Packing = true
	packed, err := data.NewChatDataset(path, tok, tmpl, o)
	require.NoError(t, err)
	assert.Equal(t, plain.Conversations, packed.Conversations)
	assert.Equal(t, 1, packed.Cut)
	assert.Equal(t, 1, packed.Dropped)
	assert.Equal(t, 0, plain.Windows)
	require.Equal(t, packed.Windows, packed.Len())
	assert.Less(t, packed.Len(), plain.Len())
	assert.Equal(t, plain.Tokens, packed.Tokens)
	assert.Contains(t, packed.Summary(), "; packed into ")

	// Each conversation, as the unpacked data set has it, keyed by its ids.
	want := map[string][]int64{}
	for i := range plain.Len() {
		var s data.Sample
		require.NoError(t, plain.Get(i, &s))
		assert.Nil(t, s.Field(data.LMPositionIDs))
		want[key(data.Values[int64](s.MustField(data.LMInputIDs)))] = data.Values[int64](s.MustField(data.LMLabels))
	}
	seen := 0
	for w := range packed.Len() {
		var s data.Sample
		require.NoError(t, packed.Get(w, &s))
		ids := data.Values[int64](s.MustField(data.LMInputIDs))
		labels := data.Values[int64](s.MustField(data.LMLabels))
		pos := data.Values[int64](s.MustField(data.LMPositionIDs))
		require.LessOrEqual(t, len(ids), 96)
		require.Len(t, labels, len(ids))
		require.Len(t, pos, len(ids))
		for start := 0; start < len(ids); {
			require.Equal(t, int64(0), pos[start], "window %d", w)
			end := start + 1
			for end < len(ids) && pos[end] == pos[end-1]+1 {
				end++
			}
			wantLabels, ok := want[key(ids[start:end])]
			require.True(t, ok, "window %d holds a conversation at %d..%d", w, start, end)
			delete(want, key(ids[start:end]))
			assert.Equal(t, int64(data.IgnoreIndex), labels[start])
			assert.Equal(t, wantLabels[1:], labels[start+1:end], "window %d", w)
			seen++
			start = end
		}
	}
	assert.Equal(t, plain.Len(), seen)
	assert.Empty(t, want, "every conversation is in a window")
}

func key(ids []int64) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteRune(rune(id))
	}
	return b.String()
}

// TestChatPackedLossIsOneByOne: batches of packed windows (padded by the loader, with
// their attention mask and position_ids) give a tiny Llama the summed loss and label
// count of the conversations run one by one.
func TestChatPackedLossIsOneByOne(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer torch.NewScope().Close()
	tok, tmpl := chatSetup(t)
	path := packConversations(t)
	o := data.ChatOptions{BlockSize: 96, Template: chat.Options{Now: pinned}}
	plain, err := data.NewChatDataset(path, tok, tmpl, o)
	require.NoError(t, err)
	o.Packing = true
	packed, err := data.NewChatDataset(path, tok, tmpl, o)
	require.NoError(t, err)

	torch.ManualSeed(3)
	c := models.DefaultLlamaConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 258, 16, 24, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 2, 1, 96
	m, err := models.NewLlamaForCausalLM(c)
	require.NoError(t, err)
	defer nn.Free(m)
	nn.SetTraining(m, false)

	var wantSum float64
	var wantCount int64
	for i := range plain.Len() {
		var s data.Sample
		require.NoError(t, plain.Get(i, &s))
		ids := data.Values[int64](s.MustField(data.LMInputIDs))
		x := torch.FromSlice(ids, 1, int64(len(ids)))
		y := torch.FromSlice(data.Values[int64](s.MustField(data.LMLabels)), 1, int64(len(ids)))
		sum, count := models.LMLossSum(m, models.DecoderInput{InputIDs: x}, y, models.LossFull)
		wantSum += sum.Item()
		wantCount += int64(count.Item())
	}

	l, err := data.NewLoader(packed, data.LoaderOptions{BatchSize: 2, Pad: data.LMPad(0), Inline: true})
	require.NoError(t, err)
	it := l.Iter(context.Background(), 0, 0)
	defer it.Close()
	var gotSum float64
	var gotCount int64
	for b, ok := it.Next(); ok; b, ok = it.Next() {
		in := models.DecoderInput{InputIDs: b.Get(data.LMInputIDs), PositionIDs: b.Get(data.LMPositionIDs),
			AttentionMask: b.Get(data.MaskName(data.LMInputIDs))}
		sum, count := models.LMLossSum(m, in, b.Get(data.LMLabels), models.LossFull)
		gotSum += sum.Item()
		gotCount += int64(count.Item())
	}
	require.NoError(t, it.Err())
	assert.Equal(t, wantCount, gotCount)
	assert.InDelta(t, wantSum, gotSum, 1e-5)
}
