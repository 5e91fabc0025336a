package nn_test

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Self-attention over a padded batch: the key padding mask leaves out the padding, the
// causal flag the future, as in torch.nn.MultiheadAttention.
func ExampleMultiheadAttention() {
	mha := nn.NewMultiheadAttention(16, 4, nn.MultiheadAttentionConfig{BatchFirst: true})
	defer nn.Free(mha)
	torch.WithScope(func() {
		x := torch.Randn([]int64{2, 5, 16}, torch.Float32, torch.CPU) // [N, L, E]
		// The second sequence has 3 tokens and 2 of padding.
		pad := torch.FromSlice([]bool{false, false, false, false, false, false, false, false, true, true}, 2, 5)
		out, w := mha.AttendWithWeights(x, x, x, nn.AttentionMasks{KeyPaddingMask: pad, Causal: true})
		fmt.Println(out.Shape(), w.Shape())
		fmt.Printf("weight of a padded key: %.1f\n", w.Select(0, 1).Select(0, 4).Select(0, 3).Item())
	})
	// Output:
	// [2 5 16] [2 5 5]
	// weight of a padded key: 0.0
}
