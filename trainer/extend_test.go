package trainer_test

// Adding a data format and a callback (docs/extending.md): a data format is a type
// implementing data.Dataset (Len, and Get writing one sample's named fields), and a
// callback is a type implementing trainer.Callback, with trainer.Subscriber to name its
// events and trainer.Stateful to keep its state in checkpoints. This file adds one of
// each from outside both packages and trains through the Trainer with them.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
	"github.com/gotrain/gotrain/torch/nn"
	"github.com/gotrain/gotrain/torch/nn/models"
	"github.com/gotrain/gotrain/torch/optim"
	"github.com/gotrain/gotrain/trainer"
)

// Points is a data format: a text file of one sample a line, "label x y" (a class and
// two coordinates), with # comments. Sample i has the fields data.Input (float32 [2])
// and data.Label (an int64 scalar), the fields the Trainer's default steps read.
type Points struct {
	xy     []float32
	labels []int64
}

// OpenPoints reads a points file. It must be a regular file (data.OpenRegular refuses a
// directory, a FIFO or a device at once), and a line that is not "label x y" is an error
// naming the file and line.
func OpenPoints(path string) (*Points, error) {
	f, _, err := data.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := &Points{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s:%d: want \"label x y\", got %d fields", path, line, len(fields))
		}
		label, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || label < 0 {
			return nil, fmt.Errorf("%s:%d: label %q is not a class number", path, line, fields[0])
		}
		var xy [2]float32
		for i, s := range fields[1:] {
			v, err := strconv.ParseFloat(s, 32)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: coordinate %q: %w", path, line, s, err)
			}
			xy[i] = float32(v)
		}
		p.xy = append(p.xy, xy[:]...)
		p.labels = append(p.labels, label)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(p.labels) == 0 {
		return nil, fmt.Errorf("%s: no samples", path)
	}
	return p, nil
}

// Len is the number of samples.
func (p *Points) Len() int { return len(p.labels) }

// Get writes sample i's fields into s.
func (p *Points) Get(i int, s *data.Sample) error {
	copy(data.SetValues[float32](s, data.Input, 2), p.xy[2*i:2*i+2])
	data.SetScalar(s, data.Label, p.labels[i])
	return nil
}

// LossLog is a callback: it records each epoch's training loss, counts the optimizer
// steps, and stops training once the loss is below Target. It acts at two events only
// (Subscriber), and its record survives a resume (Stateful).
type LossLog struct {
	Target float64
	Losses []float64
	Steps  int64
}

// Events names the events LossLog acts at; the Trainer calls it at no others.
func (l *LossLog) Events() trainer.EventSet {
	return trainer.Events(trainer.AfterOptimizerStep, trainer.EpochEnd)
}

// OnEvent records and decides.
func (l *LossLog) OnEvent(e trainer.Event, t *trainer.Trainer) error {
	switch e {
	case trainer.AfterOptimizerStep:
		l.Steps++
	case trainer.EpochEnd:
		loss := t.History[len(t.History)-1].TrainLoss
		l.Losses = append(l.Losses, loss)
		if loss < l.Target {
			t.Stop(fmt.Sprintf("train_loss %.3f < %g", loss, l.Target))
		}
	}
	return nil
}

// StateKey names LossLog's state in a checkpoint's "callbacks".
func (l *LossLog) StateKey() string { return "loss_log" }

// StateDict returns the state as a checkpoint dict (plain values: torch.load reads it).
func (l *LossLog) StateDict() *checkpoint.Dict {
	d := checkpoint.NewDict()
	losses := make([]any, len(l.Losses))
	for i, v := range l.Losses {
		losses[i] = v
	}
	d.Set("losses", losses)
	d.Set("steps", l.Steps)
	return d
}

// LoadStateDict restores the state StateDict returned.
func (l *LossLog) LoadStateDict(d *checkpoint.Dict) error {
	steps, err := checkpoint.GetInt(d, "steps")
	if err != nil {
		return err
	}
	losses, err := checkpoint.GetList(d, "losses")
	if err != nil {
		return err
	}
	l.Steps, l.Losses = steps, nil
	for _, v := range losses {
		f, err := checkpoint.GetFloat(v)
		if err != nil {
			return err
		}
		l.Losses = append(l.Losses, f)
	}
	return nil
}

// writePoints writes n points of two classes (above or below the diagonal) to path.
func writePoints(t *testing.T, path string, n int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	b.WriteString("# label x y\n")
	for range n {
		x, y := r.Float64()*2-1, r.Float64()*2-1
		label := 0
		if y > x {
			label = 1
		}
		fmt.Fprintf(&b, "%d %.4f %.4f\n", label, x, y)
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
}

func TestExtendDataFormatAndCallback(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("# label x y\n1 0.5 0.25\n0 0.5\n"), 0o644))
	_, err := OpenPoints(bad)
	require.ErrorContains(t, err, "bad.txt:3: want \"label x y\", got 2 fields")
	_, err = OpenPoints(dir)
	var notRegular *data.NotRegularError
	require.ErrorAs(t, err, &notRegular, "a directory is not a points file")

	trainPath, valPath := filepath.Join(dir, "train.txt"), filepath.Join(dir, "val.txt")
	writePoints(t, trainPath, 512, 1)
	writePoints(t, valPath, 256, 2)
	trainSet, err := OpenPoints(trainPath)
	require.NoError(t, err)
	valSet, err := OpenPoints(valPath)
	require.NoError(t, err)
	newTrainer := func(rec *LossLog, runDir string) *trainer.Trainer {
		torch.ManualSeed(3)
		model := models.MLP(2, 16, 2)
		opt, err := optim.NewAdam(nn.Parameters(model), optim.AdamOptions{LR: 1e-2})
		require.NoError(t, err)
		train, err := data.NewLoader(trainSet, data.LoaderOptions{BatchSize: 32, Shuffle: true, Workers: 2})
		require.NoError(t, err)
		val, err := data.NewLoader(valSet, data.LoaderOptions{BatchSize: 128})
		require.NoError(t, err)
		tr, err := trainer.New(model, train, val, &nn.CrossEntropyLoss{}, opt, trainer.WithEpochs(40),
			trainer.WithCallbacks(rec), trainer.WithRunDir(runDir), trainer.WithOutput(io.Discard))
		require.NoError(t, err)
		return tr
	}

	rec := &LossLog{Target: 0.15}
	runDir := filepath.Join(dir, "run")
	tr := newTrainer(rec, runDir)
	require.NoError(t, tr.Run(context.Background()))
	epochs := len(tr.History)
	assert.Less(t, epochs, 40, "the callback stopped the run")
	assert.Contains(t, tr.StopReason(), "train_loss")
	t.Logf("stopped after %d epochs: %s", epochs, tr.StopReason())
	require.Len(t, rec.Losses, epochs, "one loss an epoch")
	for i, r := range tr.History {
		assert.Equal(t, r.TrainLoss, rec.Losses[i], "epoch %d", r.Epoch)
	}
	assert.Less(t, rec.Losses[epochs-1], 0.15)
	assert.Equal(t, tr.GlobalStep, rec.Steps, "called at every optimizer step")
	assert.EqualValues(t, epochs*512/32, rec.Steps)
	assert.Greater(t, tr.History[epochs-1].ValAcc, 0.95, "validation accuracy")

	// The callback's state is in the checkpoint under its key, and a resumed Trainer
	// gives it back.
	last := filepath.Join(runDir, "checkpoints", "last.pt")
	ck, err := checkpoint.Read(last)
	require.NoError(t, err)
	steps, err := checkpoint.GetInt(ck, "callbacks", "loss_log", "steps")
	require.NoError(t, err)
	assert.Equal(t, rec.Steps, steps)
	again := &LossLog{Target: 0.15}
	require.NoError(t, newTrainer(again, filepath.Join(dir, "resumed")).LoadCheckpoint(last))
	assert.Equal(t, rec.Steps, again.Steps)
	assert.Equal(t, rec.Losses, again.Losses)
}
