package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gotrain/gotrain/torch"
)

// kernelClasses sorts kernels (or, on a CPU, ATen ops) into the classes issue 35 asks
// about, by name; the first match wins, so the specific patterns come first. The same
// table classifies gotrain's and PyTorch's events (bench.py hands its events over raw).
var kernelClasses = []struct {
	name string
	re   *regexp.Regexp
}{
	{"optimizer", regexp.MustCompile(`adam|_foreach|multi_tensor|multitensor`)},
	{"attention", regexp.MustCompile(`flash|fmha|attention|sdpa|scaled_dot_product|cudnn_attn`)},
	{"loss", regexp.MustCompile(`nll_loss|log_softmax|cross_entropy|logsoftmax`)},
	{"norm", regexp.MustCompile(`layer_norm|layernorm|batch_norm|batchnorm|rms_norm|welford|bn_fw|bn_bw`)},
	{"conv", regexp.MustCompile(`conv|implicit_gemm|implicit_convolve|winograd|dgrad|wgrad|fprop|cudnn`)},
	{"matmul", regexp.MustCompile(`gemm|matmul|(^|[_:])(add|b)?mm([_\d]|$)|linear|cutlass|xmma|nvjet|gemv|sm90_|sm80_|cublas`)},
	{"softmax", regexp.MustCompile(`softmax`)},
	{"reduction", regexp.MustCompile(`reduce|aten::sum|aten::mean|aten::max|argmax|aten::norm`)},
	{"copy", regexp.MustCompile(`copy|cast|aten::to|_to_copy|contiguous|cat|index|gather|scatter|embedding|transpose|permute|memcpy`)},
	{"elementwise", regexp.MustCompile(`elementwise|vectorized|unrolled|triton_|aten::(add|mul|sub|div|gelu|relu|silu|tanh|sigmoid|dropout|fill|where|threshold|pow|neg|exp|rsqrt|zero)|gelu|relu|dropout|fill`)},
}

// classOf returns the class of a kernel or op name.
func classOf(name string) string {
	n := strings.ToLower(name)
	for _, c := range kernelClasses {
		if c.re.MatchString(n) {
			return c.name
		}
	}
	return "other"
}

// profileSummary is one side's profile: what runs per training step, by class.
type profileSummary struct {
	Impl      string `json:"impl"`
	Mode      string `json:"mode,omitempty"`
	Model     string `json:"model"`
	Precision string `json:"precision"`
	Device    string `json:"device"`
	Steps     int    `json:"steps"`
	// What is counted: "kernels" (CUDA kernels, from CUPTI) or "ops" (on a CPU: every ATen
	// op, timed by its self time).
	Counted string `json:"counted"`
	// PerStep is the count of kernels (or leaf ops) per step and TimePerStepS their time.
	PerStep      float64                  `json:"per_step"`
	TimePerStepS float64                  `json:"time_per_step_s"`
	HostOps      float64                  `json:"host_ops_per_step"` // ATen ops dispatched on the host, nested ones too
	Classes      map[string]*profileClass `json:"classes"`
	Top          []profileName            `json:"top"` // the 15 names that took most time
}

// profileClass is a class's count and time per step.
type profileClass struct {
	PerStep      float64 `json:"per_step"`
	TimePerStepS float64 `json:"time_per_step_s"`
}

// profileName is one kernel or op name's share.
type profileName struct {
	Name         string  `json:"name"`
	Class        string  `json:"class"`
	PerStep      float64 `json:"per_step"`
	TimePerStepS float64 `json:"time_per_step_s"`
}

// summarize aggregates events recorded over steps training steps.
func summarize(evs []torch.ProfileEvent, steps int) profileSummary {
	s := profileSummary{Steps: steps, Classes: map[string]*profileClass{}}
	var items []timed
	for _, e := range evs {
		if e.Kind == torch.ProfiledKernel {
			items = append(items, timed{e.Name, e.Duration})
		}
		if e.Kind == torch.ProfiledOp {
			s.HostOps++
		}
	}
	s.Counted = "kernels"
	if len(items) == 0 {
		s.Counted = "ops"
		items = selfTimes(evs)
	}
	// Sums first, per step last: adding 1/steps a thousand times drifts.
	per := float64(steps)
	byName := map[string]*profileName{}
	for _, it := range items {
		c := classOf(it.name)
		pc := s.Classes[c]
		if pc == nil {
			pc = &profileClass{}
			s.Classes[c] = pc
		}
		pc.PerStep++
		pc.TimePerStepS += it.dur.Seconds()
		pn := byName[it.name]
		if pn == nil {
			pn = &profileName{Name: it.name, Class: c}
			byName[it.name] = pn
		}
		pn.PerStep++
		pn.TimePerStepS += it.dur.Seconds()
	}
	for _, pc := range s.Classes {
		s.PerStep += pc.PerStep
		s.TimePerStepS += pc.TimePerStepS
		pc.PerStep /= per
		pc.TimePerStepS /= per
	}
	s.PerStep /= per
	s.TimePerStepS /= per
	s.HostOps /= per
	for _, pn := range byName {
		pn.PerStep /= per
		pn.TimePerStepS /= per
		s.Top = append(s.Top, *pn)
	}
	sort.Slice(s.Top, func(i, j int) bool { return s.Top[i].TimePerStepS > s.Top[j].TimePerStepS })
	if len(s.Top) > 15 {
		s.Top = s.Top[:15]
	}
	return s
}

// timed is a kernel's or op's name and duration.
type timed struct {
	name string
	dur  time.Duration
}

// selfTimes returns every host op with its self time (its duration less its children's):
// on a CPU the ops are the kernels, and nested ones (aten::linear calls aten::addmm, which
// calls aten::empty) would count twice by their durations.
func selfTimes(evs []torch.ProfileEvent) []timed {
	byThread := map[uint64][]torch.ProfileEvent{}
	for _, e := range evs {
		if e.Kind == torch.ProfiledOp {
			byThread[e.Thread] = append(byThread[e.Thread], e)
		}
	}
	var out []timed
	for _, ops := range byThread {
		// Parents first: by start, the longer of two that start together first.
		slices.SortFunc(ops, func(a, b torch.ProfileEvent) int {
			if a.Start != b.Start {
				return cmp.Compare(a.Start, b.Start)
			}
			return cmp.Compare(b.Duration, a.Duration)
		})
		first := len(out)
		var open []int // indexes into out of the ops that contain the current one
		for _, e := range ops {
			for len(open) > 0 {
				p := ops[open[len(open)-1]-first]
				if e.Start < p.Start+p.Duration {
					break
				}
				open = open[:len(open)-1]
			}
			if len(open) > 0 {
				out[open[len(open)-1]].dur -= e.Duration
			}
			out = append(out, timed{e.Name, e.Duration})
			open = append(open, len(out)-1)
		}
	}
	return out
}

// runProfile profiles o.steps training steps of o.model after o.warmup ones in gotrain
// (torch.Profile) and, when mo.python is set, in PyTorch (bench.py profile, each of
// mo.modes), and prints what runs per step by class.
func runProfile(o options, mo memOptions, modes string) (any, bool, error) {
	if o.dir == "" {
		d, err := os.MkdirTemp("", "gotrain-profile")
		if err != nil {
			return nil, false, err
		}
		defer os.RemoveAll(d)
		o.dir = d
	}
	o.keepForward = false // profile runs the Trainer's step; -keep-forward is train's and mem's
	m, s, err := prepare(o)
	if err != nil {
		return nil, false, fmt.Errorf("profile: %w", err)
	}
	defer m.free()
	evs, err := profileSteps(m, s, o.device)
	if err != nil {
		return nil, false, err
	}
	res := []profileSummary{summarize(evs, s.Steps)}
	res[0].Impl, res[0].Model, res[0].Precision, res[0].Device = "gotrain", s.Model, s.Precision, s.Device
	if mo.python != "" {
		py, err := pythonProfile(mo.python, o.dir, modes, s.Steps)
		if err != nil {
			return nil, false, err
		}
		res = append(res, py...)
	}
	printProfile(os.Stderr, res)
	return res, true, nil
}

// profileSteps runs the step of timeSteps: warm-up steps, then s.Steps under the profiler.
func profileSteps(m *benchModel, s spec, dev torch.Device) (evs []torch.ProfileEvent, err error) {
	defer torch.Recover(&err, "profile "+s.Model)
	t, err := newSession(m, s, dev)
	if err != nil {
		return nil, err
	}
	defer t.close()
	step := func(i int) { torch.WithScope(func() { t.step(i) }) }
	for i := 0; i < s.Warmup; i++ {
		step(i)
	}
	synchronize(dev)
	evs, err = torch.Profile(dev.IsCUDA(), func() {
		for i := 0; i < s.Steps; i++ {
			step(s.Warmup + i)
		}
		synchronize(dev)
	})
	return evs, err
}

// pythonProfile runs bench.py profile on the spec in dir and summarizes each mode's
// events with the same classes.
func pythonProfile(python, dir, modes string, steps int) ([]profileSummary, error) {
	args := []string{"bench/gpu/bench.py", "profile", dir, "--modes", modes}
	cmd := exec.Command(python, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", python, strings.Join(args, " "), err)
	}
	var res []profileSummary
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		var r struct {
			Impl, Mode, Model, Precision, Device string
			// Events: [name, kind, on_cuda, thread, start_ns, dur_ns], torch.ProfileKind's kinds.
			Events [][]any
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("bench.py profile output: %v", err)
		}
		evs := make([]torch.ProfileEvent, 0, len(r.Events))
		for _, e := range r.Events {
			if len(e) != 6 {
				return nil, fmt.Errorf("bench.py profile: an event of %d fields", len(e))
			}
			name, _ := e[0].(string)
			kind, _ := e[1].(float64)
			cuda, _ := e[2].(bool)
			thread, _ := e[3].(float64)
			start, _ := e[4].(float64)
			dur, _ := e[5].(float64)
			evs = append(evs, torch.ProfileEvent{Name: name, Kind: torch.ProfileKind(kind), OnCUDA: cuda, Thread: uint64(thread),
				Start: time.Duration(start), Duration: time.Duration(dur)})
		}
		s := summarize(evs, steps)
		s.Impl, s.Mode, s.Model, s.Precision, s.Device = r.Impl, r.Mode, r.Model, r.Precision, r.Device
		res = append(res, s)
	}
	return res, sc.Err()
}

// printProfile writes the sides' classes as a markdown table: count and ms per step.
func printProfile(w *os.File, res []profileSummary) {
	if len(res) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s %s on %s, %s per training step (%d steps profiled):\n\n", res[0].Model, res[0].Precision, res[0].Device, res[0].Counted, res[0].Steps)
	head, rule := "| class |", "|---|"
	for _, r := range res {
		name := r.Impl
		if r.Mode != "" && r.Mode != "eager" {
			name += " " + r.Mode
		}
		head += fmt.Sprintf(" %s: count | ms |", name)
		rule += "--:|--:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	classes := []string{}
	for _, c := range kernelClasses {
		classes = append(classes, c.name)
	}
	for _, c := range append(classes, "other") {
		line := "| " + c + " |"
		seen := false
		for _, r := range res {
			if pc := r.Classes[c]; pc != nil {
				line += fmt.Sprintf(" %.1f | %.3f |", pc.PerStep, pc.TimePerStepS*1e3)
				seen = true
			} else {
				line += " – | – |"
			}
		}
		if seen {
			fmt.Fprintln(w, line)
		}
	}
	line := "| **all** |"
	for _, r := range res {
		line += fmt.Sprintf(" %.1f | %.3f |", r.PerStep, r.TimePerStepS*1e3)
	}
	fmt.Fprintln(w, line)
	line = "| host ops dispatched |"
	for _, r := range res {
		line += fmt.Sprintf(" %.0f | |", r.HostOps)
	}
	fmt.Fprintln(w, line)
}
