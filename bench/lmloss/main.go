// Command lmloss prints the peak CPU tensor memory of one training step's forward and
// backward pass of a small Qwen2 with Qwen2's 151,936-token vocabulary, with the loss
// taken from the whole logits (models.LossFull) and chunked (models.LossChunked): the
// figure docs/performance.md gives for issue 40's chunked cross-entropy.
//
//	eval "$(make -s print-env)"
//	go run -tags cpu ./bench/lmloss
//
// Memory is counted by the counting CPU allocator (torch.CountCPUMemory, installed
// before the model is built): the peak of the bytes CPU tensors hold during the step,
// less what they held before it (the weights), so the gradients the step leaves count,
// as they do in a real step.
package main

import (
	"flag"
	"fmt"
	"log"
	"runtime"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

func main() {
	batch := flag.Int64("batch", 2, "sequences per batch")
	seq := flag.Int64("seq", 512, "tokens per sequence")
	hidden := flag.Int64("hidden", 256, "hidden_size")
	vocab := flag.Int64("vocab", 151936, "vocab_size")
	layers := flag.Int64("layers", 2, "num_hidden_layers")
	flag.Parse()
	runtime.LockOSThread()
	torch.CountCPUMemory()
	torch.ManualSeed(0)

	c := models.DefaultQwen2Config()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = *vocab, *hidden, 3**hidden, *layers
	c.NumAttentionHeads, c.NumKeyValueHeads, c.MaxPositionEmbeddings = 4, 2, *seq
	c.TieWordEmbeddings, c.SlidingWindow = true, nil // as Qwen2.5-0.5B
	m, err := models.NewQwen2ForCausalLM(c)
	if err != nil {
		log.Fatal(err)
	}
	ids := torch.Randint(0, *vocab, []int64{*batch, *seq}, torch.Int64, torch.CPU).Escape()
	in := models.DecoderInput{InputIDs: ids}
	fmt.Printf("Qwen2, %d layers, hidden %d, vocab %d, tied head; batch %d × %d tokens; float32 logits %.0f MiB\n",
		*layers, *hidden, *vocab, *batch, *seq, float64(*batch**seq**vocab*4)/(1<<20))
	fmt.Println("| loss | peak tensor memory of forward + backward, MiB | loss |")
	fmt.Println("|---|---|---|")
	for _, mode := range []struct {
		name string
		mode models.LossMode
	}{{"whole logits (LossFull)", models.LossFull}, {"chunked (LossChunked)", models.LossChunked}} {
		for _, p := range nn.Parameters(m) {
			p.SetGrad(nil)
		}
		start := torch.CPUMemoryStats().Allocated
		torch.ResetCPUPeakMemory()
		var loss float64
		torch.WithScope(func() {
			l := models.LMLoss(m, in, ids, mode.mode)
			l.Backward()
			loss = l.Item()
		})
		peak := torch.CPUMemoryStats().PeakAllocated - start
		fmt.Printf("| %s | %.1f | %.6f |\n", mode.name, float64(peak)/(1<<20), loss)
	}
}
