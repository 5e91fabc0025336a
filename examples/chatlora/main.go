// Chatlora fine-tunes a Hugging Face decoder directory (Llama, Qwen2, Mistral, GPT-2,
// ...) with LoRA on conversations, through the library as a Go service would, without
// cmd/train: a JSONL file of {"messages": [{"role": ..., "content": ...}, ...]} records,
// rendered with the directory's own chat template, the loss on the assistant's turns
// only, weighted by tokens; a budget in optimizer steps with a linear warmup and decay,
// evaluations every few steps, and the adapter saved at the end as PEFT's files
// (adapter_config.json, adapter_model.safetensors), which peft's
// PeftModel.from_pretrained and cmd/generate --adapter load.
//
//	go run ./examples/chatlora -model ./SmolLM2-135M-Instruct -data chat.jsonl -out adapter
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/gotrain/gotrain/tokenizer"
	"github.com/gotrain/gotrain/tokenizer/chat"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/lora"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// options are the example's flags.
type options struct {
	Model, Data, Out, RunDir string
	BlockSize, BatchSize     int
	MaxSteps, EvalEvery      int
	WarmupSteps              int
	LR                       float64
	Rank                     int
	Packing                  bool
	Device                   string
}

// step is the training and evaluation step: the next-token loss of the assistant
// tokens, as a sum with its token count under trainer.NumItems, so that the Trainer
// weights every label token alike across batches of different lengths (transformers'
// num_items_in_batch). Padding is masked out of attention; packed windows carry
// position_ids, which keep their conversations apart.
func step(m models.CausalLM, b data.Batch) (*torch.Tensor, trainer.Metrics) {
	in := models.DecoderInput{InputIDs: b.Get(data.LMInputIDs), AttentionMask: b.Get(data.MaskName(data.LMInputIDs))}
	if b.Has(data.LMPositionIDs) {
		in.PositionIDs = b.Get(data.LMPositionIDs)
	}
	sum, n := models.LMLossSum(m, in, b.Get(data.LMLabels), models.LossAuto)
	return sum, trainer.Metrics{trainer.NumItems: n}
}

// warmupLinear is transformers' get_linear_schedule_with_warmup as a LambdaLR factor:
// up from 0 over warmup steps, then down to 0 at step total.
func warmupLinear(warmup, total int64) func(int64) float64 {
	return func(step int64) float64 {
		if step < warmup {
			return float64(step) / float64(warmup)
		}
		return max(0, float64(total-step)/float64(max(1, total-warmup)))
	}
}

// loaders reads the conversations with the directory's tokenizer and chat template and
// holds out a tenth of them (at least one) for validation. Batches are padded to their
// longest sample: the pad id on inputs (with the attention mask), IgnoreIndex on labels.
func loaders(o options, dev torch.Device) (train, val *data.Loader, err error) {
	tok, err := tokenizer.LoadDir(o.Model)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := chat.LoadDir(o.Model)
	if err != nil {
		return nil, nil, err
	}
	// A pinned date: a template's strftime_now renders the same text on every run.
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ds, err := data.NewChatDataset(o.Data, tok, tmpl, data.ChatOptions{BlockSize: o.BlockSize, Packing: o.Packing,
		Template: chat.Options{Now: now}})
	if err != nil {
		return nil, nil, err
	}
	fmt.Println(ds.Summary())
	if ds.Len() < 2 {
		return nil, nil, fmt.Errorf("%s: %d samples: none left to validate on", o.Data, ds.Len())
	}
	nVal := max(1, ds.Len()/10)
	parts, err := data.RandomSplit(ds, []int{ds.Len() - nVal, nVal}, 1)
	if err != nil {
		return nil, nil, err
	}
	pad, ok := tok.PAD()
	if !ok {
		if pad, ok = tok.EOS(); !ok {
			return nil, nil, errors.New("the tokenizer has neither a pad nor an end-of-sequence token to pad with")
		}
	}
	lo := data.LoaderOptions{BatchSize: o.BatchSize, Shuffle: true, Seed: 1, Device: dev, Pad: data.LMPad(pad)}
	if train, err = data.NewLoader(parts[0], lo); err != nil {
		return nil, nil, err
	}
	lo.Shuffle = false
	val, err = data.NewLoader(parts[1], lo)
	return train, val, err
}

// run fine-tunes o.Model for o.MaxSteps optimizer steps and saves the adapter to o.Out.
func run(o options) (*trainer.Trainer, error) {
	dev, err := trainer.ResolveDevice(o.Device)
	if err != nil {
		return nil, err
	}
	train, val, err := loaders(o, dev)
	if err != nil {
		return nil, err
	}
	torch.ManualSeed(1) // the adapters' initial weights
	m, err := models.LoadPretrained(o.Model, models.LoadOptions{Device: dev})
	if err != nil {
		return nil, err
	}
	defer nn.Free(m)
	// Inject freezes the base model: only the adapters' A and B train.
	adapter, err := lora.Inject(m, lora.Config{R: o.Rank, Alpha: float64(2 * o.Rank),
		TargetModules: lora.Modules("q_proj", "v_proj"), BaseModelNameOrPath: o.Model})
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewAdamW(nn.TrainableParameters(m), optim.AdamOptions{LR: o.LR})
	if err != nil {
		return nil, err
	}
	sched, err := optim.NewLambdaLR(opt, warmupLinear(int64(o.WarmupSteps), int64(o.MaxSteps)))
	if err != nil {
		return nil, err
	}
	// The loss is the step's; New's loss argument is for the default step only.
	t, err := trainer.New(m, train, val, nil, opt,
		trainer.WithTrainStep(step),
		trainer.WithScheduler(sched, trainer.PerStep),
		trainer.WithMaxSteps(o.MaxSteps), // whatever the epochs
		trainer.WithEvalEvery(o.EvalEvery),
		trainer.WithMonitor("val_loss", trainer.Min),
		trainer.WithRunDir(o.RunDir), trainer.WithModelConfig("chatlora"))
	if err != nil {
		return nil, err
	}
	if err := t.Run(context.Background()); err != nil {
		return t, err
	}
	return t, adapter.Save(o.Out)
}

func main() {
	var o options
	flag.StringVar(&o.Model, "model", "", "Hugging Face model directory: config.json, safetensors, tokenizer.json, chat template")
	flag.StringVar(&o.Data, "data", "", `JSONL file of {"messages": [...]} conversations`)
	flag.StringVar(&o.Out, "out", "adapter", "directory for the adapter (PEFT's files)")
	flag.StringVar(&o.RunDir, "run-dir", "", "run directory for checkpoints and history (empty: none)")
	flag.IntVar(&o.BlockSize, "block-size", 1024, "most tokens of a sample; longer conversations keep their leading turns")
	flag.IntVar(&o.BatchSize, "batch-size", 8, "batch size")
	flag.IntVar(&o.MaxSteps, "max-steps", 200, "optimizer steps")
	flag.IntVar(&o.EvalEvery, "eval-every", 50, "evaluate every n optimizer steps")
	flag.IntVar(&o.WarmupSteps, "warmup-steps", 10, "steps of linear warmup")
	flag.Float64Var(&o.LR, "lr", 2e-4, "peak learning rate")
	flag.IntVar(&o.Rank, "r", 16, "LoRA rank")
	flag.BoolVar(&o.Packing, "packing", false, "pack whole conversations into windows of the block size")
	flag.StringVar(&o.Device, "device", "auto", "device: auto, cpu, cuda:0")
	flag.Parse()
	if _, err := run(o); err != nil {
		log.Fatal(err)
	}
}
