package trainer

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/nn"
)

// Version is gotrain's version, recorded in checkpoints and config.json.
const Version = "0.1.0"

// SaveCheckpoint writes the full training state to path, atomically, as a torch.save
// file. It holds the seed's keys (model_state_dict, optimizer_state_dict,
// scheduler_state_dict, epoch, best_metric, history, model_config) so the seed's Python
// GPUTrainer.load_checkpoint reads it, plus what an exact resume needs: scaler state, RNG
// states, global step, position in the epoch and its running statistics, callback
// states, the config and versions.
func (t *Trainer) SaveCheckpoint(path string) (err error) {
	defer torch.Recover(&err, "saving checkpoint "+path)
	scope := torch.NewScope()
	defer scope.Close()
	d := checkpoint.NewDict()
	d.Set("model_state_dict", nn.StateDict(t.Model))
	d.Set("optimizer_state_dict", t.Optimizer.StateDict())
	if t.Scheduler != nil {
		d.Set("scheduler_state_dict", t.Scheduler.StateDict())
	} else {
		d.Set("scheduler_state_dict", nil)
	}
	d.Set("epoch", int64(t.Epoch))
	d.Set("best_metric", t.BestMetric)
	hist := make([]any, len(t.History))
	for i, r := range t.History {
		hist[i] = recordDict(r)
	}
	d.Set("history", hist)
	d.Set("model_config", t.modelConfig)
	d.Set("scaler_state_dict", t.Scaler.StateDict())
	rng := checkpoint.NewDict()
	rng.Set("cpu", torch.RNGState(torch.CPU))
	var cudaStates []any
	for i := 0; i < torch.CUDADeviceCount(); i++ {
		cudaStates = append(cudaStates, torch.RNGState(torch.CUDA(i)))
	}
	rng.Set("cuda", cudaStates)
	d.Set("rng_state", rng)
	d.Set("global_step", t.GlobalStep)
	d.Set("batch_in_epoch", int64(t.BatchInEpoch))
	st := checkpoint.NewDict()
	st.Set("loss_sum", t.epochStats.LossSum)
	st.Set("batches", int64(t.epochStats.Batches))
	st.Set("samples", t.epochStats.Samples)
	st.Set("grad_norm_sum", t.epochStats.GradNormSum)
	st.Set("steps", int64(t.epochStats.Steps))
	st.Set("skipped", int64(t.epochStats.Skipped))
	st.Set("elapsed", t.epochStats.Elapsed)
	st.Set("wait", t.epochStats.Wait)
	d.Set("epoch_progress", st)
	cbs := checkpoint.NewDict()
	for _, cb := range t.callbacks {
		if s, ok := cb.(Stateful); ok {
			cbs.Set(s.StateKey(), s.StateDict())
		}
	}
	d.Set("callbacks", cbs)
	cfg, err := json.Marshal(t.Config)
	if err != nil {
		return err
	}
	d.Set("config", string(cfg))
	ver := checkpoint.NewDict()
	ver.Set("gotrain", Version)
	ver.Set("torch", torch.Version())
	d.Set("versions", ver)
	cv, err := torch.ToCheckpoint(d)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return checkpoint.Write(path, cv)
}

func recordDict(r Record) *checkpoint.Dict {
	d := checkpoint.NewDict()
	d.Set("epoch", int64(r.Epoch))
	d.Set("train_loss", r.TrainLoss)
	d.Set("val_loss", r.ValLoss)
	d.Set("val_acc", r.ValAcc)
	d.Set("elapsed_sec", r.Elapsed)
	d.Set("lr", r.LR)
	d.Set("samples_per_sec", r.SamplesPerSec)
	d.Set("grad_norm", r.GradNorm)
	d.Set("loss_scale", r.LossScale)
	d.Set("skipped_steps", int64(r.SkippedSteps))
	d.Set("data_wait_frac", r.DataWait)
	if len(r.Metrics) > 0 {
		m := checkpoint.NewDict()
		for k, v := range r.Metrics {
			m.Set(k, v)
		}
		d.Set("metrics", m)
	}
	return d
}

func recordFrom(v any) Record {
	f := func(k string) float64 {
		x, err := checkpoint.GetFloat(v, k)
		if err != nil {
			return math.NaN()
		}
		return x
	}
	i := func(k string) int {
		x, _ := checkpoint.GetInt(v, k)
		return int(x)
	}
	r := Record{Epoch: i("epoch"), TrainLoss: f("train_loss"), ValLoss: f("val_loss"), ValAcc: f("val_acc"),
		Elapsed: f("elapsed_sec"), LR: f("lr"), SamplesPerSec: f("samples_per_sec"), GradNorm: f("grad_norm"),
		LossScale: f("loss_scale"), SkippedSteps: i("skipped_steps"), DataWait: f("data_wait_frac")}
	if m, err := checkpoint.GetDict(v, "metrics"); err == nil {
		r.Metrics = map[string]float64{}
		for k, x := range m.All() {
			if s, ok := k.(string); ok {
				if fv, ok := x.(float64); ok {
					r.Metrics[s] = fv
				}
			}
		}
	}
	return r
}

// LoadCheckpoint restores the training state from a checkpoint written by SaveCheckpoint
// or by the seed's Python trainer (which has only its seven keys: training then resumes at
// the next epoch boundary with fresh RNG state). Tensors are mapped to the trainer's device.
// Optimizer state is loaded before scheduler state, after both exist, as PyTorch requires.
func (t *Trainer) LoadCheckpoint(path string) (err error) {
	defer torch.Recover(&err, "loading checkpoint "+path)
	raw, err := checkpoint.Read(path)
	if err != nil {
		return err
	}
	scope := torch.NewScope()
	defer scope.Close()
	v, err := torch.FromCheckpoint(raw, t.Device)
	if err != nil {
		return err
	}
	get := func(key string) (*checkpoint.Dict, error) {
		d, err := checkpoint.GetDict(v, key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return d, nil
	}
	msd, err := get("model_state_dict")
	if err != nil {
		return err
	}
	if err := nn.LoadStateDict(t.Model, msd, true); err != nil {
		return fmt.Errorf("%s: model_state_dict: %w", path, err)
	}
	osd, err := get("optimizer_state_dict")
	if err != nil {
		return err
	}
	if err := t.Optimizer.LoadStateDict(osd); err != nil {
		return fmt.Errorf("%s: optimizer_state_dict: %w", path, err)
	}
	if s, err := checkpoint.Get(v, "scheduler_state_dict"); err == nil && s != nil && t.Scheduler != nil {
		sd, ok := s.(*checkpoint.Dict)
		if !ok {
			return fmt.Errorf("%s: scheduler_state_dict is %T, want a dict", path, s)
		}
		if err := t.Scheduler.LoadStateDict(sd); err != nil {
			return fmt.Errorf("%s: scheduler_state_dict: %w", path, err)
		}
	}
	epoch, err := checkpoint.GetInt(v, "epoch")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	t.Epoch = int(epoch)
	if bm, err := checkpoint.GetFloat(v, "best_metric"); err == nil {
		t.BestMetric = bm
	}
	t.History = nil
	if h, err := checkpoint.GetList(v, "history"); err == nil {
		for _, r := range h {
			t.History = append(t.History, recordFrom(r))
		}
	}
	if gs, err := checkpoint.GetInt(v, "global_step"); err == nil {
		t.GlobalStep = gs
	} else {
		t.GlobalStep = int64(t.Epoch * ((t.Train.Len() + t.Config.Accumulation - 1) / t.Config.Accumulation))
	}
	t.BatchInEpoch = 0
	if b, err := checkpoint.GetInt(v, "batch_in_epoch"); err == nil {
		t.BatchInEpoch = int(b)
	}
	t.epochStats = epochStats{}
	if st, err := checkpoint.GetDict(v, "epoch_progress"); err == nil {
		fl := func(k string) float64 { x, _ := checkpoint.GetFloat(st, k); return x }
		in := func(k string) int64 { x, _ := checkpoint.GetInt(st, k); return x }
		t.epochStats = epochStats{LossSum: fl("loss_sum"), Batches: int(in("batches")), Samples: in("samples"),
			GradNormSum: fl("grad_norm_sum"), Steps: int(in("steps")), Skipped: int(in("skipped")),
			Elapsed: fl("elapsed"), Wait: fl("wait")}
		t.scatterEpochProgress() // DDP hook (ddp.go)
	}
	if sd, err := checkpoint.GetDict(v, "scaler_state_dict"); err == nil {
		if err := t.Scaler.LoadStateDict(sd); err != nil {
			return fmt.Errorf("%s: scaler_state_dict: %w", path, err)
		}
	}
	if cbs, err := checkpoint.GetDict(v, "callbacks"); err == nil {
		for _, cb := range t.callbacks {
			if s, ok := cb.(Stateful); ok {
				if d, err := checkpoint.GetDict(cbs, s.StateKey()); err == nil {
					if err := s.LoadStateDict(d); err != nil {
						return fmt.Errorf("%s: callback %s: %w", path, s.StateKey(), err)
					}
				}
			}
		}
	}
	// RNG last: everything above may draw nothing, but be safe against future changes.
	if cpu, err := checkpoint.Get(raw, "rng_state", "cpu"); err == nil {
		ct, ok := cpu.(*checkpoint.Tensor)
		if ok {
			st, err := torch.TensorFromCheckpoint(ct, torch.CPU)
			if err != nil {
				return err
			}
			torch.SetRNGState(torch.CPU, st)
		}
	}
	if cuda, err := checkpoint.GetList(raw, "rng_state", "cuda"); err == nil {
		for i, c := range cuda {
			if ct, ok := c.(*checkpoint.Tensor); ok && i < torch.CUDADeviceCount() {
				st, err := torch.TensorFromCheckpoint(ct, torch.CPU)
				if err != nil {
					return err
				}
				torch.SetRNGState(torch.CUDA(i), st)
			}
		}
	}
	t.printf("resumed from %s: epoch %d, batch %d, global step %d, best %s %.4f\n", path, t.Epoch, t.BatchInEpoch, t.GlobalStep, t.Config.Monitor, t.BestMetric)
	return nil
}
