package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
	"github.com/gotrain/gotrain/trainer"
)

func TestMain(m *testing.M) { disttest.Main(m, map[string]func() error{"rank": rank}) }

// rank trains one rank of two for 2 epochs in $RUN_DIR, resuming from $RESUME when set;
// with STOP=1, rank 0 is cancelled in epoch 2 after batch 3 (mid-window: the ranks stop
// together after batch 4, the end of the optimizer step).
func rank() error {
	pg, err := disttest.Join(30 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cbs []trainer.Callback
	if os.Getenv("STOP") == "1" && pg.Rank() == 0 {
		cbs = append(cbs, trainer.CallbackFunc(func(e trainer.Event, t *trainer.Trainer) error {
			if e == trainer.BatchEnd && t.Epoch == 1 && t.BatchInEpoch == 3 {
				cancel()
			}
			return nil
		}))
	}
	t, err := Build(pg, os.Getenv("RUN_DIR"), 2, io.Discard, cbs...)
	if err != nil {
		return err
	}
	if r := os.Getenv("RESUME"); r != "" {
		if err := t.LoadCheckpoint(r); err != nil {
			return err
		}
	}
	err = t.Run(ctx)
	if ie := (*trainer.InterruptedError)(nil); errors.As(err, &ie) && os.Getenv("STOP") == "1" {
		return nil
	}
	return err
}

func spawn(t *testing.T, env ...string) {
	t.Helper()
	for r, c := range disttest.Spawn(t, "rank", 2, append(env, "OMP_NUM_THREADS=1")) {
		require.NoErrorf(t, c.Err, "rank %d:\n%s", r, c.Output)
	}
}

// TestTwoRanksResumeIsExact is issue 13's acceptance 3: a model with two inputs and an
// int64 token field (padded, with its mask) trains through its own step with bf16
// autocast, accumulation 2 and two-rank Gloo data parallelism, and a run interrupted
// mid-epoch and resumed ends bitwise equal to an uninterrupted one.
func TestTwoRanksResumeIsExact(t *testing.T) {
	dir := t.TempDir()
	ref, cut := filepath.Join(dir, "ref"), filepath.Join(dir, "cut")
	spawn(t, "RUN_DIR="+ref)
	spawn(t, "RUN_DIR="+cut, "STOP=1")
	last := filepath.Join(cut, "checkpoints", "last.pt")
	v, err := checkpoint.Read(last)
	require.NoError(t, err)
	epoch, _ := checkpoint.GetInt(v, "epoch")
	batch, _ := checkpoint.GetInt(v, "batch_in_epoch")
	assert.Equal(t, []int64{1, 4}, []int64{epoch, batch}, "stopped in epoch 2 at the end of the step after batch 3")
	spawn(t, "RUN_DIR="+cut, "RESUME="+last)

	want, err := checkpoint.Read(filepath.Join(ref, "checkpoints", "last.pt"))
	require.NoError(t, err)
	got, err := checkpoint.Read(last)
	require.NoError(t, err)
	for _, key := range []string{"model_state_dict", "optimizer_state_dict", "scaler_state_dict", "epoch", "global_step"} {
		a, err := checkpoint.Get(want, key)
		require.NoError(t, err)
		b, err := checkpoint.Get(got, key)
		require.NoError(t, err)
		require.NoError(t, sameBits(key, a, b))
	}
	for _, key := range []string{"train_loss", "val_loss", "val_acc"} {
		for e := range 2 {
			a, _ := checkpoint.GetFloat(want, "history", e, key)
			b, _ := checkpoint.GetFloat(got, "history", e, key)
			assert.Equal(t, math.Float64bits(a), math.Float64bits(b), "history[%d].%s: %v vs %v", e, key, a, b)
		}
	}
	l0, _ := checkpoint.GetFloat(want, "history", 0, "train_loss")
	l1, _ := checkpoint.GetFloat(want, "history", 1, "train_loss")
	assert.Less(t, l1, l0, "it learns")
}

// sameBits compares two checkpoint values: tensors byte for byte, floats bit for bit.
func sameBits(path string, x, y any) error {
	switch a := x.(type) {
	case *checkpoint.Tensor:
		b, ok := y.(*checkpoint.Tensor)
		if !ok || !bytes.Equal(a.Bytes(), b.Bytes()) || fmt.Sprint(a.Shape) != fmt.Sprint(b.Shape) {
			return fmt.Errorf("%s: tensors differ", path)
		}
	case *checkpoint.Dict:
		b, ok := y.(*checkpoint.Dict)
		if !ok || a.Len() != b.Len() {
			return fmt.Errorf("%s: dicts differ", path)
		}
		for k, av := range a.All() {
			bv, _ := b.Get(k)
			if err := sameBits(fmt.Sprintf("%s.%v", path, k), av, bv); err != nil {
				return err
			}
		}
	case []any:
		b, ok := y.([]any)
		if !ok || len(a) != len(b) {
			return fmt.Errorf("%s: lists differ", path)
		}
		for i := range a {
			if err := sameBits(fmt.Sprintf("%s[%d]", path, i), a[i], b[i]); err != nil {
				return err
			}
		}
	case float64:
		if b, ok := y.(float64); !ok || math.Float64bits(a) != math.Float64bits(b) {
			return fmt.Errorf("%s: %v vs %v", path, x, y)
		}
	default:
		if fmt.Sprint(x) != fmt.Sprint(y) {
			return fmt.Errorf("%s: %v vs %v", path, x, y)
		}
	}
	return nil
}

func TestExampleRuns(t *testing.T) {
	require.NoError(t, run(1, t.TempDir()))
}
