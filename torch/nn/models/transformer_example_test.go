package models_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
)

// A byte-level GPT-2: build it, take its loss on a batch of token ids, generate from a
// prompt with top-k sampling, and save it as a Hugging Face directory that
// transformers' GPT2LMHeadModel.from_pretrained loads.
func ExampleGPT2LMHeadModel() {
	c := models.DefaultGPT2Config()
	c.VocabSize, c.NPositions, c.NEmbd, c.NLayer, c.NHead = 256, 64, 32, 2, 4
	m, err := models.NewGPT2LMHeadModel(c)
	if err != nil {
		panic(err)
	}
	defer nn.Free(m)
	torch.WithScope(func() {
		ids := torch.Full([]int64{2, 16}, 73, torch.Int64, torch.CPU) // "IIII..." twice
		fmt.Println("logits:", m.Forward(models.DecoderInput{InputIDs: ids}).Shape(), "loss is a scalar:", m.Loss(ids).Dim() == 0)
	})

	nn.SetTraining(m, false)
	seed := int64(7)
	out, err := models.Generate(m, [][]int64{{73, 110, 32, 116, 104, 101}}, // "In the"
		models.GenerateOptions{MaxNewTokens: 8, Sample: true, TopK: 40, Temperature: 0.9, Seed: &seed, IgnoreEOS: true})
	if err != nil {
		panic(err)
	}
	fmt.Println("new tokens:", len(out[0]))

	dir, err := os.MkdirTemp("", "gpt2")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	if err := m.SavePretrained(dir); err != nil {
		panic(err)
	}
	back, err := models.LoadPretrained(dir, models.LoadOptions{}) // by config.json's model_type
	if err != nil {
		panic(err)
	}
	defer nn.Free(back)
	_, errCfg := os.Stat(filepath.Join(dir, models.ConfigFile))
	fmt.Println("config.json written:", errCfg == nil, "layers loaded:", len(back.(*models.GPT2LMHeadModel).Transformer.H))
	// Output:
	// logits: [2 16 256] loss is a scalar: true
	// new tokens: 8
	// config.json written: true layers loaded: 2
}
