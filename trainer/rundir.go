package trainer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gotrain/gotrain/torch"
)

// NewExperimentID returns a run name from the model and the time: "cnn-20261201-134502".
func NewExperimentID(model string) string {
	if model == "" {
		model = "run"
	}
	return model + "-" + time.Now().Format("20060102-150405")
}

// RunDirFor returns RunsDir/Experiment for a config, choosing an experiment id when
// the config has none.
func RunDirFor(c *Config) string {
	if c.Experiment == "" {
		c.Experiment = NewExperimentID(c.Model)
	}
	if c.RunsDir == "" {
		c.RunsDir = "runs"
	}
	return filepath.Join(c.RunsDir, c.Experiment)
}

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
		&HistoryWriter{Path: filepath.Join(t.RunDir, "history.jsonl")},
		&TensorBoard{Dir: t.RunDir},
		&Curves{Path: filepath.Join(t.RunDir, "curves.png")},
	}
	// The checkpoint manager runs last, so last.pt holds every callback's updated state.
	t.callbacks = append(append(writers, t.callbacks...),
		NewModelCheckpoint(filepath.Join(t.RunDir, "checkpoints"), t.Config.Monitor, t.Config.MonitorMode, t.Config.TopK))
	return nil
}

type runInfo struct {
	Config
	GotrainVersion string `json:"gotrain_version"`
	TorchVersion   string `json:"torch_version"`
	DeviceUsed     string `json:"device_used"`
	Started        string `json:"started"`
}

func (t *Trainer) writeConfig() error {
	b, err := json.MarshalIndent(runInfo{Config: t.Config, GotrainVersion: Version, TorchVersion: torch.Version(),
		DeviceUsed: t.Device.String(), Started: time.Now().UTC().Format(time.RFC3339)}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(t.RunDir, "config.json"), append(b, '\n'))
}

// writeFileAtomic writes via a temp file in the same directory, fsync and a rename, so
// readers see the old file or the new one.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := firstErr(werr, serr, cerr); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// linkAtomic makes dst another name for src's current contents: a hard link under a
// temporary name, renamed over dst, so readers see the old dst or the new one. Where the
// file system has no hard links it copies.
func linkAtomic(src, dst string) error {
	tmp := dst + ".tmp-link"
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		b, rerr := os.ReadFile(src)
		if rerr != nil {
			return err
		}
		return writeFileAtomic(dst, b)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(dst))
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
