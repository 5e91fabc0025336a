package trainer

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/curves"
	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/tensorboard"
)

// EarlyStopping stops training when the monitored metric stops improving, with
// PyTorch Lightning's semantics:
//
//   - it is checked once per epoch, after validation; Patience counts those checks;
//   - an improvement is strict and larger than MinDelta: current < best - MinDelta when
//     minimising, current > best + MinDelta when maximising (a change of exactly MinDelta
//     is no improvement);
//   - Best changes only on an improvement, which resets Wait to 0; otherwise Wait grows
//     by one and training stops once Wait >= Patience;
//   - with CheckFinite (the default from NewEarlyStopping) a NaN or infinite value stops
//     at once.
//
// Its state (Wait, Best, StoppedEpoch) is saved in checkpoints, so a resumed run counts on.
type EarlyStopping struct {
	Monitor string
	// Mode is Min or Max.
	Mode        Direction
	Patience    int
	MinDelta    float64
	CheckFinite bool

	Wait         int
	Best         float64
	StoppedEpoch int
}

// NewEarlyStopping watches monitor in direction mode (Auto: from the metric's name, see
// DirectionOf). It returns an error when mode is Auto and the name is not a known one
// (say Min or Max for your own metrics), when patience is negative or when minDelta is
// not a finite number: all of them may come from a flag or a config.
func NewEarlyStopping(monitor string, mode Direction, patience int, minDelta float64) (*EarlyStopping, error) {
	d, err := mode.resolve(monitor)
	if err != nil {
		return nil, fmt.Errorf("trainer: EarlyStopping: %w", err)
	}
	if patience < 0 {
		return nil, fmt.Errorf("trainer: EarlyStopping: patience must be >= 0, got %d", patience)
	}
	if math.IsNaN(minDelta) || math.IsInf(minDelta, 0) {
		return nil, fmt.Errorf("trainer: EarlyStopping: min_delta must be a finite number, got %v", minDelta)
	}
	return &EarlyStopping{Monitor: monitor, Mode: d, Patience: patience, MinDelta: math.Abs(minDelta), CheckFinite: true, Best: d.worst()}, nil
}

// Events is Evaluated.
func (e *EarlyStopping) Events() EventSet { return Events(Evaluated) }

// OnEvent checks the metric at each evaluation.
func (e *EarlyStopping) OnEvent(ev Event, t *Trainer) error {
	if ev != Evaluated {
		return nil
	}
	v, err := monitored(t, "EarlyStopping", e.Monitor)
	if err != nil {
		return err
	}
	stop, why := e.Check(v)
	if stop {
		e.StoppedEpoch = t.Epoch
		t.Stop(why)
	}
	return nil
}

// Check records one value and reports whether training should stop, and why.
func (e *EarlyStopping) Check(v float64) (bool, string) {
	if e.CheckFinite && (math.IsNaN(v) || math.IsInf(v, 0)) {
		return true, fmt.Sprintf("early stopping: %s = %v is not finite", e.Monitor, v)
	}
	improved := v < e.Best-e.MinDelta
	if e.Mode == Max {
		improved = v > e.Best+e.MinDelta
	}
	if improved {
		e.Best, e.Wait = v, 0
		return false, ""
	}
	e.Wait++
	if e.Wait >= e.Patience {
		return true, fmt.Sprintf("early stopping: %s did not improve on %.6g for %d epochs", e.Monitor, e.Best, e.Wait)
	}
	return false, ""
}

// StateKey names the state in checkpoints.
func (e *EarlyStopping) StateKey() string { return "EarlyStopping{monitor=" + e.Monitor + "}" }

// StateDict returns the counters, with Lightning's key names.
func (e *EarlyStopping) StateDict() *checkpoint.Dict {
	return dictOf("wait_count", int64(e.Wait), "best_score", e.Best, "stopped_epoch", int64(e.StoppedEpoch),
		"patience", int64(e.Patience))
}

// LoadStateDict restores the counters.
func (e *EarlyStopping) LoadStateDict(d *checkpoint.Dict) error {
	w, err1 := checkpoint.GetInt(d, "wait_count")
	b, err2 := checkpoint.GetFloat(d, "best_score")
	s, err3 := checkpoint.GetInt(d, "stopped_epoch")
	if err := firstErr(err1, err2, err3); err != nil {
		return err
	}
	e.Wait, e.Best, e.StoppedEpoch = int(w), b, int(s)
	return nil
}

// monitored is the epoch's value of metric name, or an error for who naming the
// metrics there are.
func monitored(t *Trainer, who, name string) (float64, error) {
	v, ok := t.Metrics[name]
	if !ok {
		return 0, fmt.Errorf("%s: metric %q is not recorded (have %s)", who, name, strings.Join(sortedKeys(t.Metrics), ", "))
	}
	return v, nil
}

// ModelCheckpoint saves the training state: last.pt after every epoch, best_model.pth
// when the monitored metric improves (the seed's file name), and, with TopK > 0, the k
// best epochs as epoch=NNN-<monitor>=<value>.pt. It deletes only top-k files it wrote
// itself (its table survives resume), never anything else in the directory.
type ModelCheckpoint struct {
	Dir     string
	Monitor string
	// Mode is Min or Max.
	Mode Direction
	TopK int

	BestScore float64
	BestPath  string
	// Kept is the top-k table: file path to score.
	Kept map[string]float64
}

// NewModelCheckpoint saves into dir, judging by monitor in direction mode (Auto: from the
// metric's name; as NewEarlyStopping does, it returns an error for a name it does not
// know, and for a negative topK).
func NewModelCheckpoint(dir, monitor string, mode Direction, topK int) (*ModelCheckpoint, error) {
	d, err := mode.resolve(monitor)
	if err != nil {
		return nil, fmt.Errorf("trainer: ModelCheckpoint: %w", err)
	}
	if topK < 0 {
		return nil, fmt.Errorf("trainer: ModelCheckpoint: top_k must be >= 0, got %d", topK)
	}
	return &ModelCheckpoint{Dir: dir, Monitor: monitor, Mode: d, TopK: topK, Kept: map[string]float64{}, BestScore: d.worst()}, nil
}

// Events is Evaluated and EpochEnd.
func (m *ModelCheckpoint) Events() EventSet { return Events(Evaluated, EpochEnd) }

// OnEvent saves at each evaluation: at Evaluated inside an epoch, and at EpochEnd for
// an epoch's end, so that the checkpoint holds the state every callback has once the
// epoch ended.
func (m *ModelCheckpoint) OnEvent(ev Event, t *Trainer) error {
	switch {
	case ev == Evaluated && t.BatchInEpoch == 0: // an epoch's end: its EpochEnd saves
		return nil
	case ev == EpochEnd && t.cfg.EvalEvery > 0: // the epoch's end was no evaluation
		return nil
	case ev != Evaluated && ev != EpochEnd:
		return nil
	}
	v, err := monitored(t, "ModelCheckpoint", m.Monitor)
	if err != nil {
		return err
	}
	// Update the table first, so every file of this epoch carries the updated state.
	var same []string
	if m.Mode.better(v, m.BestScore) {
		m.BestScore = v
		m.BestPath = filepath.Join(m.Dir, "best_model.pth")
		same = append(same, m.BestPath)
	}
	if m.TopK > 0 {
		p, err := m.admitTopK(t, v)
		if err != nil {
			return err
		}
		if p != "" {
			same = append(same, p)
		}
	}
	last := filepath.Join(m.Dir, "last.pt")
	if err := t.saveCheckpointIn(m.Dir, "last.pt"); err != nil {
		return err
	}
	// The epoch's other files hold the same bytes: link them to last.pt rather than
	// serializing the state again. last.pt is replaced by a rename, so a link keeps
	// this epoch's version.
	for _, p := range same {
		if err := t.linkCheckpoint(last, p); err != nil {
			return err
		}
	}
	return nil
}

// admitTopK enters this epoch into the top-k table when it beats the worst kept epoch
// (whose file it deletes), and returns its file name, or "" when it is not kept.
func (m *ModelCheckpoint) admitTopK(t *Trainer, v float64) (string, error) {
	if len(m.Kept) >= m.TopK {
		worst, ws := "", 0.0
		for p, s := range m.Kept {
			if worst == "" || m.Mode.better(ws, s) {
				worst, ws = p, s
			}
		}
		if !m.Mode.better(v, ws) {
			return "", nil
		}
		delete(m.Kept, worst)
		if err := os.Remove(worst); err != nil && !os.IsNotExist(err) {
			return "", err
		}
	}
	path := filepath.Join(m.Dir, fmt.Sprintf("epoch=%03d-%s=%.4f.pt", t.Epoch, m.Monitor, v))
	m.Kept[path] = v
	return path, nil
}

// StateKey names the state in checkpoints.
func (m *ModelCheckpoint) StateKey() string { return "ModelCheckpoint{monitor=" + m.Monitor + "}" }

// StateDict returns the best score and the top-k table.
func (m *ModelCheckpoint) StateDict() *checkpoint.Dict {
	d := dictOf("best_model_score", m.BestScore, "best_model_path", m.BestPath)
	k := checkpoint.NewDict()
	for _, p := range sortedKeys(m.Kept) {
		k.Set(p, m.Kept[p])
	}
	d.Set("best_k_models", k)
	return d
}

// LoadStateDict restores the best score and the top-k table.
func (m *ModelCheckpoint) LoadStateDict(d *checkpoint.Dict) error {
	s, err := checkpoint.GetFloat(d, "best_model_score")
	if err != nil {
		return err
	}
	m.BestScore = s
	m.BestPath, _ = checkpoint.GetString(d, "best_model_path")
	m.Kept = map[string]float64{}
	if k, err := checkpoint.GetDict(d, "best_k_models"); err == nil {
		for p, v := range k.All() {
			ps, _ := p.(string)
			vf, _ := v.(float64)
			m.Kept[ps] = vf
		}
	}
	return nil
}

// HistoryWriter rewrites the history file after every epoch: JSON lines, or CSV when
// Path ends in .csv. Path, named by the caller, is written through a symlink; the run
// directory's own history.jsonl replaces one (see writeOutput).
type HistoryWriter struct {
	Path  string
	inDir bool // a file the Trainer names in the run directory
}

// Events is Evaluated.
func (h *HistoryWriter) Events() EventSet { return Events(Evaluated) }

// OnEvent writes at each evaluation.
func (h *HistoryWriter) OnEvent(ev Event, t *Trainer) error {
	if ev != Evaluated {
		return nil
	}
	var b strings.Builder
	if strings.HasSuffix(h.Path, ".csv") {
		b.WriteString("epoch,train_loss,val_loss,val_acc,lr,elapsed_sec,samples_per_sec,grad_norm,loss_scale,skipped_steps\n")
		for _, r := range t.History {
			fmt.Fprintf(&b, "%d,%g,%g,%g,%g,%g,%g,%g,%g,%d\n", r.Epoch, r.TrainLoss, r.ValLoss, r.ValAcc, r.LR, r.Elapsed, r.SamplesPerSec, r.GradNorm, r.LossScale, r.SkippedSteps)
		}
	} else {
		for _, r := range t.History {
			line, err := json.Marshal(jsonRecord(r))
			if err != nil {
				return err
			}
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return writeOutput(h.Path, h.inDir, func(w io.Writer) error {
		_, err := io.WriteString(w, b.String())
		return err
	})
}

// writeOutput writes path atomically: through its symlink when the caller named it
// (fsutil.WriteAtomic), replacing a symlink when it is a file the Trainer names inside
// the run directory (fsutil.WriteAtomicInDir), as every writer of an output directory
// does.
func writeOutput(path string, inDir bool, write func(io.Writer) error) error {
	if inDir {
		return fsutil.WriteAtomicInDir(filepath.Dir(path), filepath.Base(path), write)
	}
	return fsutil.WriteAtomic(path, write)
}

// jsonRecord is the record's history dict (fieldsDict) for JSON: NaN and infinities,
// which JSON cannot hold, become null, and user metrics sit beside the built-in keys.
func jsonRecord(r Record) map[string]any {
	m := map[string]any{}
	var put func(k string, v any)
	put = func(k string, v any) {
		switch x := v.(type) {
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				v = nil
			}
		case *checkpoint.Dict: // metrics
			for mk, mv := range x.All() {
				put(mk.(string), mv)
			}
			return
		}
		m[k] = v
	}
	for k, v := range fieldsDict(&r).All() {
		put(k.(string), v)
	}
	return m
}

// TensorBoard writes scalars to a TensorBoard event file in Dir: per epoch train/loss,
// val/loss, val/acc, the steps' other metrics (train/<name>, val/<name>), lr, grad_norm,
// loss_scale and throughput (samples/s); at the Trainer's logging points
// train/loss_step; and the run config as text.
type TensorBoard struct {
	Dir string
	w   *tensorboard.Writer
}

// Writer returns the event writer once training has begun (nil before), so other
// callbacks can add their own scalars to the same file.
func (tb *TensorBoard) Writer() *tensorboard.Writer { return tb.w }

// Events are the ones OnEvent logs at.
func (tb *TensorBoard) Events() EventSet { return Events(TrainBegin, Logged, Evaluated, TrainEnd) }

// OnEvent logs.
func (tb *TensorBoard) OnEvent(ev Event, t *Trainer) error {
	switch ev {
	case TrainBegin:
		if tb.w != nil {
			return nil
		}
		w, err := tensorboard.NewWriter(tb.Dir)
		if err != nil {
			return err
		}
		tb.w = w
		cfg, err := json.MarshalIndent(t.cfg, "", "  ")
		if err != nil {
			return err
		}
		return w.AddText("config", "```\n"+string(cfg)+"\n```", t.GlobalStep)
	case Logged:
		if tb.w != nil {
			return tb.w.AddScalar("train/loss_step", t.LastLoss, t.GlobalStep)
		}
	case Evaluated:
		if tb.w == nil {
			return nil
		}
		r := t.History[len(t.History)-1]
		x := int64(r.Epoch) // step-budgeted runs plot by optimizer step
		if t.cfg.EvalEvery > 0 || t.cfg.MaxSteps > 0 {
			x = r.Step
		}
		vals := map[string]float64{"train/loss": r.TrainLoss, "lr": r.LR, "throughput": r.SamplesPerSec, "loss_scale": r.LossScale}
		if !math.IsNaN(r.ValLoss) {
			vals["val/loss"] = r.ValLoss
			vals["val/acc"] = r.ValAcc
		}
		if !math.IsNaN(r.GradNorm) {
			vals["grad_norm"] = r.GradNorm
		}
		for k, v := range r.Metrics {
			vals[strings.Replace(k, "_", "/", 1)] = v
		}
		if err := tb.w.AddScalars(x, vals); err != nil {
			return err
		}
		return tb.w.Flush()
	case TrainEnd:
		if tb.w != nil {
			err := tb.w.Close()
			tb.w = nil
			return err
		}
	}
	return nil
}

// Curves draws loss and accuracy per epoch to a PNG after every epoch. Path follows the
// rule of HistoryWriter's.
type Curves struct {
	Path  string
	inDir bool
}

// Events is Evaluated.
func (c *Curves) Events() EventSet { return Events(Evaluated) }

// OnEvent draws at each evaluation.
func (c *Curves) OnEvent(ev Event, t *Trainer) error {
	if ev != Evaluated || len(t.History) == 0 {
		return nil
	}
	x := make([]float64, len(t.History))
	cols := map[string][]float64{}
	for i, r := range t.History {
		x[i] = float64(r.Epoch)
		cols["train_loss"] = append(cols["train_loss"], r.TrainLoss)
		cols["val_loss"] = append(cols["val_loss"], r.ValLoss)
		cols["val_acc"] = append(cols["val_acc"], r.ValAcc)
	}
	return writeOutput(c.Path, c.inDir, func(w io.Writer) error {
		return curves.Write(w, curves.FromHistory(filepath.Base(t.RunDir), x, cols))
	})
}

// LRMonitor records the learning rate of every parameter group after each optimizer
// step, and writes it to a TensorBoard callback's file when one is given.
type LRMonitor struct {
	TensorBoard *TensorBoard
	// Steps and LRs are the recorded (global step, LR per group) pairs.
	Steps []int64
	LRs   [][]float64
}

// Events is BatchEnd.
func (m *LRMonitor) Events() EventSet { return Events(BatchEnd) }

// OnEvent records at BatchEnd.
func (m *LRMonitor) OnEvent(ev Event, t *Trainer) error {
	if ev != BatchEnd || (len(m.Steps) > 0 && m.Steps[len(m.Steps)-1] == t.GlobalStep) {
		return nil
	}
	var lrs []float64
	for i, g := range t.Optimizer.ParamGroups() {
		lrs = append(lrs, g.LR)
		if m.TensorBoard != nil && m.TensorBoard.w != nil {
			if err := m.TensorBoard.w.AddScalar(fmt.Sprintf("lr/group%d", i), g.LR, t.GlobalStep); err != nil {
				return err
			}
		}
	}
	m.Steps = append(m.Steps, t.GlobalStep)
	m.LRs = append(m.LRs, lrs)
	return nil
}
