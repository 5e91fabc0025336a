package trainer

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/fsutil"
	"github.com/gotrain/gotrain/torch"
)

// setupRunDir creates the run directory, writes config.json and installs the run
// directory's callbacks: history.jsonl, TensorBoard events and curves.png ahead of the
// user's, and checkpoints (best, last, top-k) after them.
func (t *Trainer) setupRunDir() error {
	if err := os.MkdirAll(filepath.Join(t.RunDir, "checkpoints"), 0o755); err != nil {
		return err
	}
	if err := t.writeConfig(); err != nil {
		return err
	}
	writers := []Callback{
		&HistoryWriter{Path: filepath.Join(t.RunDir, "history.jsonl"), inDir: true},
		&TensorBoard{Dir: t.RunDir},
		&Curves{Path: filepath.Join(t.RunDir, "curves.png"), inDir: true},
	}
	// The checkpoint manager runs last, so last.pt holds every callback's updated state.
	ckpt, err := NewModelCheckpoint(filepath.Join(t.RunDir, "checkpoints"), t.cfg.Monitor, t.cfg.MonitorMode, t.cfg.TopK)
	if err != nil {
		return err
	}
	t.callbacks = append(append(writers, t.callbacks...), ckpt)
	return nil
}

// runRecord is what the Trainer was given, as config.json and every checkpoint's
// "config" record it: its Config, the model's name, the optimizer's class and
// param_groups, the scheduler's class ("none" without one) and the program's own
// configuration (WithRunConfig).
type runRecord struct {
	Config
	Model     string          `json:"model"`
	Optimizer optimizerRecord `json:"optimizer"`
	Scheduler string          `json:"scheduler"`
	Run       json.RawMessage `json:"run,omitempty"`
}

// optimizerRecord names an optimizer and its param_groups without their parameters.
type optimizerRecord struct {
	Class       string           `json:"class"`
	ParamGroups []map[string]any `json:"param_groups"`
}

// record returns what the Trainer was given.
func (t *Trainer) record() runRecord {
	r := runRecord{Config: t.cfg, Model: t.modelConfig, Scheduler: "none", Run: t.runConfig,
		Optimizer: optimizerRecord{Class: className(t.Optimizer)}}
	if t.Scheduler != nil {
		r.Scheduler = className(t.Scheduler)
	}
	groups, _ := t.Optimizer.StateDict().Get("param_groups")
	list, _ := groups.([]any)
	for _, g := range list {
		d, ok := g.(*checkpoint.Dict)
		if !ok {
			continue
		}
		rec := map[string]any{}
		for k, v := range d.All() {
			if name, ok := k.(string); ok && name != "params" {
				rec[name] = jsonValue(v)
			}
		}
		r.Optimizer.ParamGroups = append(r.Optimizer.ParamGroups, rec)
	}
	return r
}

// className is v's class name: its Name() when it has one (an optim.Algorithm's
// optimizer), else its type's name without the package: "AdamW", "CosineAnnealingLR".
func className(v any) string {
	if n, ok := v.(interface{ Name() string }); ok {
		return n.Name()
	}
	name := fmt.Sprintf("%T", v)
	return name[strings.LastIndexAny(name, ".*")+1:]
}

// jsonValue turns a state-dict value (numbers, strings, tuples, lists) into one
// encoding/json writes; NaN and infinities become their names.
func jsonValue(v any) any {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x)
		}
		return x
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case checkpoint.Tuple:
		return jsonValue([]any(x))
	case int64, bool, string, nil:
		return x
	}
	return fmt.Sprint(v)
}

type runInfo struct {
	runRecord
	GotrainVersion string `json:"gotrain_version"`
	TorchVersion   string `json:"torch_version"`
	DeviceUsed     string `json:"device_used"`
	Started        string `json:"started"`
}

func (t *Trainer) writeConfig() error {
	b, err := json.MarshalIndent(runInfo{runRecord: t.record(), GotrainVersion: Version, TorchVersion: torch.Version(),
		DeviceUsed: t.Device.String(), Started: time.Now().UTC().Format(time.RFC3339)}, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileInDir(t.RunDir, "config.json", append(b, '\n'))
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
