package optim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
)

// The scheduler constructors follow gotrain's constructor rule (docs/extending.md,
// "Errors and panics"): step sizes, rates and milestones often come from a flag or a
// config, so an impossible one (a step size below 1, a factor out of range, a list of the
// wrong length) is a returned error naming the argument and its value, where PyTorch
// raises ValueError. A constructor that returns an error has not touched the optimizer.

// Scheduler is a learning-rate scheduler, torch.optim.lr_scheduler's LRScheduler: Step
// advances it by one epoch (or step) and writes the new learning rates into the
// optimizer's parameter groups.
type Scheduler interface {
	// Step advances the schedule and sets the groups' LR.
	Step()
	// LastLR returns the learning rates the last Step set (get_last_lr()).
	LastLR() []float64
	// StateDict returns PyTorch's scheduler.state_dict() keys and values.
	StateDict() *checkpoint.Dict
	// LoadStateDict restores a state dict from StateDict or from Python.
	LoadStateDict(sd *checkpoint.Dict) error
}

// MetricScheduler is a scheduler stepped with a metric, as ReduceLROnPlateau is.
type MetricScheduler interface {
	Scheduler
	// StepMetric advances the schedule given the epoch's metric (validation loss...).
	StepMetric(v float64)
}

// lrBase is LRScheduler's shared state and step logic.
type lrBase struct {
	opt       Optimizer
	baseLRs   []float64
	lastEpoch int64
	stepCount int64
	isInitial bool
	lastLRs
	// getLR is the recursive ("chainable") form; closed is the closed form, or nil.
	getLR  func() []float64
	closed func() []float64
	// fields are the subclass's numeric fields, then own writes and loadOwn reads its
	// others: all precede the common keys.
	fields  []schedField
	own     func(d *checkpoint.Dict)
	loadOwn func(d *checkpoint.Dict) error
}

// schedField is a scheduler's numeric state-dict key and its field, an *int64 or a
// *float64.
type schedField struct {
	key string
	ptr any
}

// lastLRs holds the learning rates the last step set.
type lastLRs struct{ lastLR []float64 }

// LastLR returns the learning rates set by the last step.
func (s *lastLRs) LastLR() []float64 { return slices.Clone(s.lastLR) }

func (s *lrBase) init(opt Optimizer) {
	s.opt = opt
	for _, g := range opt.ParamGroups() {
		if !g.HasInitialLR {
			g.InitialLR, g.HasInitialLR = g.LR, true
		}
		s.baseLRs = append(s.baseLRs, g.InitialLR)
	}
	s.lastEpoch = -1
	s.initialStep()
}

func (s *lrBase) initialStep() {
	s.stepCount = 0
	s.isInitial = true
	s.Step()
	s.isInitial = false
}

func (s *lrBase) lrs() []float64 { return groupLRs(s.opt) }

// groupLRs returns the optimizer's groups' learning rates.
func groupLRs(opt Optimizer) []float64 {
	var out []float64
	for _, g := range opt.ParamGroups() {
		out = append(out, g.LR)
	}
	return out
}

// scale multiplies v by f in place and returns it.
func scale(v []float64, f float64) []float64 {
	for i := range v {
		v[i] *= f
	}
	return v
}

func (s *lrBase) base() *lrBase { return s }

// Step advances the schedule by one and sets the optimizer's learning rates.
func (s *lrBase) Step() {
	s.stepCount++
	s.update(nil)
}

func (s *lrBase) update(epoch *int64) {
	get := s.getLR
	if epoch == nil {
		s.lastEpoch++
	} else {
		s.lastEpoch = *epoch
		if s.closed != nil {
			get = s.closed
		}
	}
	v := get()
	for i, g := range s.opt.ParamGroups() {
		g.LR = v[i]
	}
	s.lastLR = s.lrs()
}

// LastEpoch returns the number of steps taken since construction (last_epoch).
func (s *lrBase) LastEpoch() int64 { return s.lastEpoch }

// anys converts v to a Python list.
func anys[T any](v []T) []any {
	out := make([]any, len(v))
	for i, f := range v {
		out[i] = f
	}
	return out
}

// StateDict returns PyTorch's LRScheduler.state_dict(): the scheduler's own fields,
// then base_lrs, last_epoch, _step_count, _is_initial, _get_lr_called_within_step and
// _last_lr.
func (s *lrBase) StateDict() *checkpoint.Dict {
	d := checkpoint.NewDict()
	for _, f := range s.fields {
		switch p := f.ptr.(type) {
		case *int64:
			d.Set(f.key, *p)
		case *float64:
			d.Set(f.key, *p)
		}
	}
	if s.own != nil {
		s.own(d)
	}
	return setAll(d, "base_lrs", anys(s.baseLRs), "last_epoch", s.lastEpoch, "_step_count", s.stepCount,
		"_is_initial", s.isInitial, "_get_lr_called_within_step", false, "_last_lr", anys(s.lastLR))
}

func getFloats(d *checkpoint.Dict, key string) ([]float64, error) {
	l, err := checkpoint.GetList(d, key)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(l))
	for i, v := range l {
		f, ok := number(v)
		if !ok {
			return nil, fmt.Errorf("%s[%d] is %T, want a number", key, i, v)
		}
		out[i] = f
	}
	return out, nil
}

func getNum(d *checkpoint.Dict, key string) (float64, error) {
	v, ok := d.Get(key)
	if !ok {
		return 0, fmt.Errorf("missing key %q", key)
	}
	f, ok := number(v)
	if !ok {
		return 0, fmt.Errorf("%s is %T, want a number", key, v)
	}
	return f, nil
}

// loadFields reads each field's number from d, in order.
func loadFields(d *checkpoint.Dict, fields []schedField) error {
	for _, f := range fields {
		v, err := getNum(d, f.key)
		if err != nil {
			return err
		}
		switch p := f.ptr.(type) {
		case *int64:
			*p = int64(v)
		case *float64:
			*p = v
		}
	}
	return nil
}

// LoadStateDict restores the state (as Python's scheduler.__dict__.update(sd)).
func (s *lrBase) LoadStateDict(sd *checkpoint.Dict) error {
	if sd == nil {
		return fmt.Errorf("optim: scheduler: nil state dict")
	}
	var err error
	wrap := func(e error) error { return fmt.Errorf("optim: scheduler: load_state_dict: %w", e) }
	if s.baseLRs, err = getFloats(sd, "base_lrs"); err != nil {
		return wrap(err)
	}
	if s.lastLR, err = getFloats(sd, "_last_lr"); err != nil {
		return wrap(err)
	}
	if err := loadFields(sd, append([]schedField{{"last_epoch", &s.lastEpoch}}, s.fields...)); err != nil {
		return wrap(err)
	}
	if sc, err := getNum(sd, "_step_count"); err == nil {
		s.stepCount = int64(sc)
	}
	if v, err := checkpoint.GetBool(sd, "_is_initial"); err == nil {
		s.isInitial = v
	}
	if s.loadOwn != nil {
		if err := s.loadOwn(sd); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// ---- StepLR, MultiStepLR, ExponentialLR ----

// StepLR multiplies the learning rate by Gamma every StepSize steps.
type StepLR struct {
	*lrBase
	StepSize int64
	Gamma    float64
}

// NewStepLR returns torch.optim.lr_scheduler.StepLR(opt, stepSize, gamma) (PyTorch's
// default gamma is 0.1), after its initial step. stepSize must be at least 1 and gamma
// a finite number >= 0.
func NewStepLR(opt Optimizer, stepSize int64, gamma float64) (*StepLR, error) {
	if stepSize < 1 {
		return nil, fmt.Errorf("optim: StepLR: step_size must be >= 1, got %d", stepSize)
	}
	if err := checkGamma("StepLR", gamma); err != nil {
		return nil, err
	}
	s := &StepLR{lrBase: &lrBase{}, StepSize: stepSize, Gamma: gamma}
	s.getLR = func() []float64 {
		if s.lastEpoch == 0 || s.lastEpoch%s.StepSize != 0 {
			return s.lrs()
		}
		return scale(s.lrs(), s.Gamma)
	}
	s.closed = func() []float64 {
		return scale(slices.Clone(s.baseLRs), math.Pow(s.Gamma, float64(floorDiv(s.lastEpoch, s.StepSize))))
	}
	s.fields = []schedField{{"step_size", &s.StepSize}, {"gamma", &s.Gamma}}
	s.init(opt)
	return s, nil
}

// checkGamma rejects a decay factor that would make the learning rate negative or not a
// number. PyTorch takes any float here; gotrain is stricter because a negative learning
// rate is one its optimizers refuse at construction, and NaN would only show up as a
// diverged run.
func checkGamma(name string, gamma float64) error {
	if !(gamma >= 0) || math.IsInf(gamma, 0) {
		return fmt.Errorf("optim: %s: gamma must be a finite number >= 0, got %v", name, gamma)
	}
	return nil
}

// floorDiv is Python's // on integers: a - pyMod(a, b) is a multiple of b.
func floorDiv(a, b int64) int64 { return (a - pyMod(a, b)) / b }

// MultiStepLR multiplies the learning rate by Gamma at each milestone step.
type MultiStepLR struct {
	*lrBase
	Milestones map[int64]int64 // milestone → count (PyTorch's Counter)
	Gamma      float64
}

// NewMultiStepLR returns torch.optim.lr_scheduler.MultiStepLR(opt, milestones, gamma).
// Its state dict stores the milestones as a plain {step: count} dict where PyTorch has a
// collections.Counter, which torch.load(weights_only=True) does not allow. The
// milestones, in any order, must be >= 0: a negative one is never reached, yet the
// closed form (used by SequentialLR) would count it.
func NewMultiStepLR(opt Optimizer, milestones []int64, gamma float64) (*MultiStepLR, error) {
	for i, m := range milestones {
		if m < 0 {
			return nil, fmt.Errorf("optim: MultiStepLR: milestones[%d] must be >= 0, got %d", i, m)
		}
	}
	if err := checkGamma("MultiStepLR", gamma); err != nil {
		return nil, err
	}
	s := &MultiStepLR{lrBase: &lrBase{}, Milestones: map[int64]int64{}, Gamma: gamma}
	for _, m := range milestones {
		s.Milestones[m]++
	}
	s.getLR = func() []float64 {
		n, ok := s.Milestones[s.lastEpoch]
		if !ok {
			return s.lrs()
		}
		return scale(s.lrs(), math.Pow(s.Gamma, float64(n)))
	}
	s.closed = func() []float64 {
		k := int64(0) // the milestones reached, each as often as it was given
		for m, n := range s.Milestones {
			if m <= s.lastEpoch {
				k += max(n, 0)
			}
		}
		return scale(slices.Clone(s.baseLRs), math.Pow(s.Gamma, float64(k)))
	}
	s.own = func(d *checkpoint.Dict) {
		md := checkpoint.NewDict()
		for _, m := range slices.Sorted(maps.Keys(s.Milestones)) {
			md.Set(m, s.Milestones[m])
		}
		setAll(d, "milestones", md, "gamma", s.Gamma)
	}
	s.loadOwn = func(d *checkpoint.Dict) error {
		md, err := checkpoint.GetDict(d, "milestones")
		if err != nil {
			return err
		}
		s.Milestones = map[int64]int64{}
		for k, v := range md.All() {
			kf, ok1 := number(k)
			vf, ok2 := number(v)
			if !ok1 || !ok2 {
				return fmt.Errorf("milestones holds %T: %T", k, v)
			}
			s.Milestones[int64(kf)] = int64(vf)
		}
		s.Gamma, err = getNum(d, "gamma")
		return err
	}
	s.init(opt)
	return s, nil
}

// ExponentialLR multiplies the learning rate by Gamma every step.
type ExponentialLR struct {
	*lrBase
	Gamma float64
}

// NewExponentialLR returns torch.optim.lr_scheduler.ExponentialLR(opt, gamma); gamma
// must be a finite number >= 0.
func NewExponentialLR(opt Optimizer, gamma float64) (*ExponentialLR, error) {
	if err := checkGamma("ExponentialLR", gamma); err != nil {
		return nil, err
	}
	s := &ExponentialLR{lrBase: &lrBase{}, Gamma: gamma}
	s.getLR = func() []float64 {
		if s.isInitial {
			return s.lrs()
		}
		return scale(s.lrs(), s.Gamma)
	}
	s.closed = func() []float64 {
		return scale(slices.Clone(s.baseLRs), math.Pow(s.Gamma, float64(s.lastEpoch)))
	}
	s.fields = []schedField{{"gamma", &s.Gamma}}
	s.init(opt)
	return s, nil
}

// ---- CosineAnnealingLR ----

// CosineAnnealingLR anneals the learning rate from its initial value to EtaMin over TMax
// steps along a cosine, with PyTorch's recursive formula (so it reads the groups' current
// LR, and the optimizer's state must be restored with the scheduler's).
type CosineAnnealingLR struct {
	*lrBase
	TMax   int64
	EtaMin float64
}

// NewCosineAnnealingLR returns torch.optim.lr_scheduler.CosineAnnealingLR(opt, tMax,
// etaMin). tMax must be at least 1 (PyTorch divides by it) and etaMin a finite number
// >= 0.
func NewCosineAnnealingLR(opt Optimizer, tMax int64, etaMin float64) (*CosineAnnealingLR, error) {
	if tMax < 1 {
		return nil, fmt.Errorf("optim: CosineAnnealingLR: T_max must be >= 1, got %d", tMax)
	}
	if !(etaMin >= 0) || math.IsInf(etaMin, 0) {
		return nil, fmt.Errorf("optim: CosineAnnealingLR: eta_min must be a finite number >= 0, got %v", etaMin)
	}
	s := &CosineAnnealingLR{lrBase: &lrBase{}, TMax: tMax, EtaMin: etaMin}
	s.getLR = func() []float64 {
		out := s.lrs()
		T, t := float64(s.TMax), float64(s.lastEpoch)
		switch {
		case s.isInitial:
		case s.stepCount == 1 && s.lastEpoch > 0:
			for i, b := range s.baseLRs {
				out[i] = s.EtaMin + (b-s.EtaMin)*(1+math.Cos(t*math.Pi/T))/2
			}
		case pyMod(s.lastEpoch-1-s.TMax, 2*s.TMax) == 0:
			for i, b := range s.baseLRs {
				out[i] = out[i] + (b-s.EtaMin)*(1-math.Cos(math.Pi/T))/2
			}
		default:
			for i := range out {
				out[i] = (1+math.Cos(math.Pi*t/T))/(1+math.Cos(math.Pi*(t-1)/T))*(out[i]-s.EtaMin) + s.EtaMin
			}
		}
		return out
	}
	s.closed = func() []float64 {
		out := make([]float64, len(s.baseLRs))
		for i, b := range s.baseLRs {
			out[i] = s.EtaMin + (b-s.EtaMin)*(1+math.Cos(math.Pi*float64(s.lastEpoch)/float64(s.TMax)))/2
		}
		return out
	}
	s.fields = []schedField{{"T_max", &s.TMax}, {"eta_min", &s.EtaMin}}
	s.init(opt)
	return s, nil
}

// pyMod is Python's % on integers (the result has the divisor's sign).
func pyMod(a, b int64) int64 {
	m := a % b
	if m != 0 && (m < 0) != (b < 0) {
		m += b
	}
	return m
}

// ---- LinearLR ----

// LinearLR scales the learning rate by a factor going linearly from StartFactor to
// EndFactor over TotalIters steps.
type LinearLR struct {
	*lrBase
	StartFactor, EndFactor float64
	TotalIters             int64
}

// NewLinearLR returns torch.optim.lr_scheduler.LinearLR(opt, startFactor, endFactor,
// totalIters); PyTorch's defaults are 1/3, 1.0 and 5. startFactor must be in (0, 1],
// endFactor in [0, 1] and totalIters at least 1.
func NewLinearLR(opt Optimizer, startFactor, endFactor float64, totalIters int64) (*LinearLR, error) {
	if !(startFactor > 0 && startFactor <= 1) {
		return nil, fmt.Errorf("optim: LinearLR: start_factor must be greater than 0 and less or equal to 1, got %v", startFactor)
	}
	if !(endFactor >= 0 && endFactor <= 1) {
		return nil, fmt.Errorf("optim: LinearLR: end_factor must be between 0 and 1, got %v", endFactor)
	}
	// PyTorch divides by total_iters in the closed form (SequentialLR's restart), where
	// 0 raises ZeroDivisionError and Go's float division would give a NaN rate.
	if totalIters < 1 {
		return nil, fmt.Errorf("optim: LinearLR: total_iters must be >= 1, got %d", totalIters)
	}
	s := &LinearLR{lrBase: &lrBase{}, StartFactor: startFactor, EndFactor: endFactor, TotalIters: totalIters}
	s.getLR = func() []float64 {
		switch {
		case s.lastEpoch == 0:
			return scale(s.lrs(), s.StartFactor)
		case s.isInitial || s.lastEpoch > s.TotalIters:
			return s.lrs()
		}
		d := s.EndFactor - s.StartFactor
		return scale(s.lrs(), 1.0+d/(float64(s.TotalIters)*s.StartFactor+float64(s.lastEpoch-1)*d))
	}
	s.closed = func() []float64 {
		f := s.StartFactor + (s.EndFactor-s.StartFactor)*float64(min(s.TotalIters, s.lastEpoch))/float64(s.TotalIters)
		return scale(slices.Clone(s.baseLRs), f)
	}
	s.fields = []schedField{
		{"start_factor", &s.StartFactor}, {"end_factor", &s.EndFactor}, {"total_iters", &s.TotalIters},
	}
	s.init(opt)
	return s, nil
}

// ---- LambdaLR ----

// LambdaLR sets each group's learning rate to its initial value times a function of the
// step count. The functions are not part of the state dict (PyTorch stores None for
// them), so a restored LambdaLR must be constructed with the same functions.
type LambdaLR struct {
	*lrBase
	lambdas []func(epoch int64) float64
}

// NewLambdaLR returns torch.optim.lr_scheduler.LambdaLR(opt, lambdas): one function for
// every group, or one per group (the number of groups may come from a config).
func NewLambdaLR(opt Optimizer, lambdas ...func(epoch int64) float64) (*LambdaLR, error) {
	n := len(opt.ParamGroups())
	if len(lambdas) == 1 {
		lambdas = slices.Repeat(lambdas, n)
	}
	if len(lambdas) != n {
		return nil, fmt.Errorf("optim: LambdaLR: expected 1 or %d lr_lambdas (one per parameter group), got %d", n, len(lambdas))
	}
	for i, f := range lambdas {
		if f == nil {
			return nil, fmt.Errorf("optim: LambdaLR: lr_lambdas[%d] is nil", i)
		}
	}
	s := &LambdaLR{lrBase: &lrBase{}, lambdas: lambdas}
	s.getLR = func() []float64 {
		out := make([]float64, len(s.baseLRs))
		for i, b := range s.baseLRs {
			out[i] = b * s.lambdas[i](s.lastEpoch)
		}
		return out
	}
	s.init(opt)
	return s, nil
}

// StateDict returns PyTorch's LambdaLR state dict, with lr_lambdas [None, ...].
func (s *LambdaLR) StateDict() *checkpoint.Dict {
	d := s.lrBase.StateDict()
	d.Set("lr_lambdas", make([]any, len(s.lambdas)))
	return d
}

// ---- OneCycleLR ----

// OneCycleOptions are torch.optim.lr_scheduler.OneCycleLR's arguments after max_lr and
// total_steps. Zero values mean PyTorch's defaults (PctStart 0.3, AnnealStrategy "cos",
// BaseMomentum 0.85, MaxMomentum 0.95, DivFactor 25, FinalDivFactor 1e4), except the
// booleans: set NoCycleMomentum to turn cycle_momentum off.
type OneCycleOptions struct {
	PctStart                  float64
	AnnealStrategy            string
	NoCycleMomentum           bool
	BaseMomentum, MaxMomentum float64
	DivFactor, FinalDivFactor float64
	ThreePhase                bool
}

// OneCycleLR is the 1cycle policy. Like PyTorch it writes initial_lr, max_lr, min_lr
// and (when cycling momentum) max_momentum, base_momentum and momentum or betas into the
// optimizer's parameter groups, so checkpoint the optimizer with it.
type OneCycleLR struct {
	*lrBase
	TotalSteps    int64
	phases        []oneCyclePhase
	anneal        string
	cycleMomentum bool
	useBeta1      bool
}

type oneCyclePhase struct {
	end                                        float64
	endIsInt                                   bool
	startLR, endLR, startMomentum, endMomentum string
}

// NewOneCycleLR returns torch.optim.lr_scheduler.OneCycleLR(opt, maxLR, totalSteps, ...).
// maxLR has one value for every group or one per group, each >= 0; totalSteps must be
// at least 1, PctStart in [0, 1], AnnealStrategy "cos" or "linear", DivFactor and
// FinalDivFactor above 0, and the optimizer must have a momentum or betas unless
// NoCycleMomentum is set.
func NewOneCycleLR(opt Optimizer, maxLR []float64, totalSteps int64, o OneCycleOptions) (*OneCycleLR, error) {
	if totalSteps <= 0 {
		return nil, fmt.Errorf("optim: OneCycleLR: total_steps must be a positive integer, got %d", totalSteps)
	}
	o.PctStart = or(o.PctStart, 0.3)
	if !(o.PctStart >= 0 && o.PctStart <= 1) {
		return nil, fmt.Errorf("optim: OneCycleLR: pct_start must be a float between 0 and 1, got %v", o.PctStart)
	}
	o.AnnealStrategy = or(o.AnnealStrategy, "cos")
	if o.AnnealStrategy != "cos" && o.AnnealStrategy != "linear" {
		return nil, fmt.Errorf("optim: OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', got %q", o.AnnealStrategy)
	}
	o.BaseMomentum = or(o.BaseMomentum, 0.85)
	o.MaxMomentum = or(o.MaxMomentum, 0.95)
	o.DivFactor = or(o.DivFactor, 25)
	o.FinalDivFactor = or(o.FinalDivFactor, 1e4)
	// PyTorch takes any float for these; a negative one makes a negative learning rate,
	// which gotrain's optimizers refuse, so it is refused here too.
	for _, f := range []struct {
		name string
		v    float64
	}{{"div_factor", o.DivFactor}, {"final_div_factor", o.FinalDivFactor}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return nil, fmt.Errorf("optim: OneCycleLR: %s must be a finite number > 0, got %v", f.name, f.v)
		}
	}
	groups := opt.ParamGroups()
	if len(maxLR) == 1 {
		maxLR = slices.Repeat(maxLR, len(groups))
	}
	if len(maxLR) != len(groups) {
		return nil, fmt.Errorf("optim: OneCycleLR: max_lr must have 1 or %d values (one per parameter group), got %d", len(groups), len(maxLR))
	}
	for i, v := range maxLR {
		if !(v >= 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("optim: OneCycleLR: max_lr[%d] must be a finite number >= 0, got %v", i, v)
		}
	}
	_, hasBetas := groups[0].Options.Get("betas")
	_, hasMomentum := groups[0].Options.Get("momentum")
	if !o.NoCycleMomentum && !hasBetas && !hasMomentum {
		return nil, fmt.Errorf("optim: OneCycleLR: cycle_momentum needs an optimizer with momentum or betas; set NoCycleMomentum")
	}
	s := &OneCycleLR{lrBase: &lrBase{}, TotalSteps: totalSteps, anneal: o.AnnealStrategy, cycleMomentum: !o.NoCycleMomentum}
	n := float64(totalSteps)
	warmup := oneCyclePhase{o.PctStart*n - 1, false, "initial_lr", "max_lr", "max_momentum", "base_momentum"}
	s.phases = []oneCyclePhase{warmup, {n - 1, true, "max_lr", "min_lr", "base_momentum", "max_momentum"}}
	if o.ThreePhase {
		s.phases = []oneCyclePhase{warmup,
			{2*o.PctStart*n - 2, false, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
			{n - 1, true, "initial_lr", "min_lr", "max_momentum", "max_momentum"}}
	}
	for i, g := range groups {
		g.InitialLR, g.HasInitialLR = maxLR[i]/o.DivFactor, true
		g.Options.Set("max_lr", maxLR[i])
		g.Options.Set("min_lr", g.InitialLR/o.FinalDivFactor)
	}
	if s.cycleMomentum {
		s.useBeta1 = hasBetas
		for _, g := range groups {
			s.setMomentum(g, o.MaxMomentum)
			g.Options.Set("max_momentum", o.MaxMomentum)
			g.Options.Set("base_momentum", o.BaseMomentum)
		}
	}
	s.getLR = s.compute
	s.fields = []schedField{{"total_steps", &s.TotalSteps}}
	s.own = s.writeOwn
	s.loadOwn = s.readOwn
	s.init(opt)
	return s, nil
}

func (s *OneCycleLR) setMomentum(g *ParamGroup, m float64) {
	if s.useBeta1 {
		b := g.Pair("betas", [2]float64{0.9, 0.999})
		g.Options.Set("betas", checkpoint.Tuple{m, b[1]})
	} else {
		g.Options.Set("momentum", m)
	}
}

func (s *OneCycleLR) annealFn(start, end, pct float64) float64 {
	if s.anneal == "linear" {
		return (end-start)*pct + start
	}
	cosOut := math.Cos(math.Pi*pct) + 1
	return end + (start-end)/2.0*cosOut
}

func groupValue(g *ParamGroup, key string) float64 {
	if key == "initial_lr" {
		return g.InitialLR
	}
	return g.Float(key, math.NaN())
}

func (s *OneCycleLR) compute() []float64 {
	step := s.lastEpoch
	// Stepping past the schedule is found only while training (PyTorch raises it from
	// step()). Step has no error result, so it panics with a *torch.Error, which
	// Trainer.Run and torch.Recover return as an error, as they do an op's misuse.
	if step > s.TotalSteps {
		panic(&torch.Error{Op: "OneCycleLR.Step", Msg: fmt.Sprintf("tried to step %d times; total_steps is %d", step, s.TotalSteps)})
	}
	var out []float64
	for _, g := range s.opt.ParamGroups() {
		start := 0.0
		var lr, mom float64
		for i, ph := range s.phases {
			if float64(step) <= ph.end || i == len(s.phases)-1 {
				pct := (float64(step) - start) / (ph.end - start)
				lr = s.annealFn(groupValue(g, ph.startLR), groupValue(g, ph.endLR), pct)
				if s.cycleMomentum {
					mom = s.annealFn(groupValue(g, ph.startMomentum), groupValue(g, ph.endMomentum), pct)
				}
				break
			}
			start = ph.end
		}
		out = append(out, lr)
		if s.cycleMomentum {
			s.setMomentum(g, mom)
		}
	}
	return out
}

func (s *OneCycleLR) writeOwn(d *checkpoint.Dict) {
	phases := make([]any, len(s.phases))
	for i, ph := range s.phases {
		var end any = ph.end
		if ph.endIsInt {
			end = int64(ph.end)
		}
		phases[i] = dictOf("end_step", end, "start_lr", ph.startLR, "end_lr", ph.endLR,
			"start_momentum", ph.startMomentum, "end_momentum", ph.endMomentum)
	}
	setAll(d, "_schedule_phases", phases, "_anneal_func_type", s.anneal, "cycle_momentum", s.cycleMomentum)
	if s.cycleMomentum {
		d.Set("use_beta1", s.useBeta1)
	}
}

func (s *OneCycleLR) readOwn(d *checkpoint.Dict) error {
	pl, err := checkpoint.GetList(d, "_schedule_phases")
	if err != nil {
		return err
	}
	s.phases = nil
	for i := range pl {
		pd, err := checkpoint.GetDict(pl, i)
		if err != nil {
			return err
		}
		var ph oneCyclePhase
		ev, _ := pd.Get("end_step")
		_, ph.endIsInt = ev.(int64)
		if ph.end, err = getNum(pd, "end_step"); err != nil {
			return err
		}
		for key, dst := range map[string]*string{"start_lr": &ph.startLR, "end_lr": &ph.endLR, "start_momentum": &ph.startMomentum, "end_momentum": &ph.endMomentum} {
			if *dst, err = checkpoint.GetString(pd, key); err != nil {
				return err
			}
		}
		s.phases = append(s.phases, ph)
	}
	if a, err := checkpoint.GetString(d, "_anneal_func_type"); err == nil {
		s.anneal = a
	}
	if s.cycleMomentum, err = checkpoint.GetBool(d, "cycle_momentum"); err != nil {
		return err
	}
	if s.cycleMomentum {
		s.useBeta1, _ = checkpoint.GetBool(d, "use_beta1")
	}
	return nil
}

// ---- SequentialLR ----

// SequentialLR runs schedulers one after another, switching at the milestones.
type SequentialLR struct {
	scheds     []*lrBase
	children   []Scheduler
	milestones []int64
	lastEpoch  int64
	lastLRs
}

// NewSequentialLR returns torch.optim.lr_scheduler.SequentialLR(opt, schedulers,
// milestones). The schedulers must be this package's epoch schedulers on opt (not
// ReduceLROnPlateau or another SequentialLR), with one more scheduler than milestones,
// and the milestones sorted (PyTorch bisects them without checking).
func NewSequentialLR(opt Optimizer, schedulers []Scheduler, milestones []int64) (*SequentialLR, error) {
	if len(schedulers) < 1 {
		return nil, fmt.Errorf("optim: SequentialLR: schedulers is empty; want at least one scheduler")
	}
	if len(milestones) != len(schedulers)-1 {
		return nil, fmt.Errorf("optim: SequentialLR: milestones must have one value fewer than schedulers: got %d schedulers and %d milestones", len(schedulers), len(milestones))
	}
	if !slices.IsSorted(milestones) {
		return nil, fmt.Errorf("optim: SequentialLR: milestones must be sorted, got %v", milestones)
	}
	s := &SequentialLR{children: schedulers, milestones: append([]int64(nil), milestones...)}
	for i, c := range schedulers {
		b, ok := c.(interface{ base() *lrBase })
		if !ok {
			return nil, fmt.Errorf("optim: SequentialLR: schedulers[%d] (%T) is not supported", i, c)
		}
		if b.base().opt != opt {
			return nil, fmt.Errorf("optim: SequentialLR: schedulers[%d] (%T) belongs to another optimizer; all must belong to the same one", i, c)
		}
		s.scheds = append(s.scheds, b.base())
	}
	for _, g := range opt.ParamGroups() {
		g.LR = g.InitialLR
	}
	for _, b := range s.scheds {
		b.lastEpoch--
	}
	idx := s.index(0)
	s.scheds[idx].initialStep()
	s.lastLR = s.scheds[idx].LastLR()
	return s, nil
}

// index is bisect_right(milestones, epoch).
func (s *SequentialLR) index(epoch int64) int {
	return sort.Search(len(s.milestones), func(i int) bool { return s.milestones[i] > epoch })
}

// Step advances the active scheduler, restarting the next one (from its closed form at
// epoch 0) at each milestone.
func (s *SequentialLR) Step() {
	s.lastEpoch++
	idx := s.index(s.lastEpoch)
	b := s.scheds[idx]
	if idx > 0 && s.milestones[idx-1] == s.lastEpoch {
		zero := int64(0)
		b.update(&zero)
	} else {
		s.children[idx].Step()
	}
	s.lastLR = b.LastLR()
}

// StateDict returns PyTorch's SequentialLR state dict: _milestones, last_epoch, _last_lr
// and _schedulers, the children's state dicts.
func (s *SequentialLR) StateDict() *checkpoint.Dict {
	cs := make([]any, len(s.children))
	for i, c := range s.children {
		cs[i] = c.StateDict()
	}
	return dictOf("_milestones", anys(s.milestones), "last_epoch", s.lastEpoch, "_last_lr", anys(s.lastLR),
		"_schedulers", cs)
}

// LoadStateDict restores a SequentialLR state dict and its children's.
func (s *SequentialLR) LoadStateDict(sd *checkpoint.Dict) error {
	le, err := getNum(sd, "last_epoch")
	if err != nil {
		return fmt.Errorf("optim: SequentialLR: %w", err)
	}
	lr, err := getFloats(sd, "_last_lr")
	if err != nil {
		return fmt.Errorf("optim: SequentialLR: %w", err)
	}
	cs, err := checkpoint.GetList(sd, "_schedulers")
	if err != nil || len(cs) != len(s.children) {
		return fmt.Errorf("optim: SequentialLR: _schedulers does not match %d schedulers", len(s.children))
	}
	for i, c := range s.children {
		cd, ok := cs[i].(*checkpoint.Dict)
		if !ok {
			return fmt.Errorf("optim: SequentialLR: _schedulers[%d] is %T", i, cs[i])
		}
		if err := c.LoadStateDict(cd); err != nil {
			return err
		}
	}
	if ms, err := getFloats(sd, "_milestones"); err == nil {
		s.milestones = s.milestones[:0]
		for _, m := range ms {
			s.milestones = append(s.milestones, int64(m))
		}
	}
	s.lastEpoch, s.lastLR = int64(le), lr
	return nil
}

// ---- ReduceLROnPlateau ----

// PlateauOptions are torch.optim.lr_scheduler.ReduceLROnPlateau's arguments. Zero values
// mean PyTorch's defaults (Mode "min", Factor 0.1, Patience 10, Threshold 1e-4,
// ThresholdMode "rel", Eps 1e-8); set ZeroPatience for a patience of 0. MinLRs has one
// value for all groups or one per group (default 0).
type PlateauOptions struct {
	Mode          string
	Factor        float64
	Patience      int64
	ZeroPatience  bool
	Threshold     float64
	ThresholdMode string
	Cooldown      int64
	MinLRs        []float64
	Eps           float64
}

// ReduceLROnPlateau reduces the learning rate by Factor when the metric has not improved
// for more than Patience epochs. Step it with StepMetric; Step alone does nothing.
type ReduceLROnPlateau struct {
	opt                          Optimizer
	factor, threshold, eps       float64
	patience, cooldown           int64
	mode, thresholdMode          string
	minLRs                       []float64
	defaultMinLR                 *float64
	best, modeWorse              float64
	cooldownCounter, numBadEpoch int64
	lastEpoch                    int64
	lastLRs
}

// NewReduceLROnPlateau returns torch.optim.lr_scheduler.ReduceLROnPlateau(opt, ...).
// Factor must be in [0, 1) (0 meaning PyTorch's 0.1), Mode "min" or "max",
// ThresholdMode "rel" or "abs", Patience, Cooldown, Threshold, Eps and MinLRs not
// negative, and MinLRs of length 0, 1 or one per group.
func NewReduceLROnPlateau(opt Optimizer, o PlateauOptions) (*ReduceLROnPlateau, error) {
	o.Factor = or(o.Factor, 0.1)
	// PyTorch checks only factor < 1.0; a negative factor would make a negative rate.
	if !(o.Factor > 0 && o.Factor < 1) {
		return nil, fmt.Errorf("optim: ReduceLROnPlateau: factor must be in (0, 1), got %v", o.Factor)
	}
	if o.Patience == 0 && !o.ZeroPatience {
		o.Patience = 10
	}
	o.Mode = or(o.Mode, "min")
	o.ThresholdMode = or(o.ThresholdMode, "rel")
	if o.Mode != "min" && o.Mode != "max" {
		return nil, fmt.Errorf("optim: ReduceLROnPlateau: mode must be \"min\" or \"max\", got %q", o.Mode)
	}
	if o.ThresholdMode != "rel" && o.ThresholdMode != "abs" {
		return nil, fmt.Errorf("optim: ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got %q", o.ThresholdMode)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"patience", float64(o.Patience)}, {"cooldown", float64(o.Cooldown)}, {"threshold", o.Threshold}, {"eps", o.Eps}} {
		if !(f.v >= 0) {
			return nil, fmt.Errorf("optim: ReduceLROnPlateau: %s must be >= 0, got %v", f.name, f.v)
		}
	}
	for i, v := range o.MinLRs {
		if !(v >= 0) {
			return nil, fmt.Errorf("optim: ReduceLROnPlateau: min_lrs[%d] must be >= 0, got %v", i, v)
		}
	}
	s := &ReduceLROnPlateau{opt: opt, factor: o.Factor, threshold: or(o.Threshold, 1e-4),
		eps: or(o.Eps, 1e-8), patience: o.Patience, cooldown: o.Cooldown, mode: o.Mode, thresholdMode: o.ThresholdMode}
	n := len(opt.ParamGroups())
	switch len(o.MinLRs) {
	case 0, 1:
		v := 0.0
		if len(o.MinLRs) == 1 {
			v = o.MinLRs[0]
		}
		s.defaultMinLR = &v
		s.minLRs = slices.Repeat([]float64{v}, n)
	case n:
		s.minLRs = append([]float64(nil), o.MinLRs...)
	default:
		return nil, fmt.Errorf("optim: ReduceLROnPlateau: min_lrs must have 1 or %d values (one per parameter group), got %d", n, len(o.MinLRs))
	}
	s.modeWorse = math.Inf(1)
	if s.mode == "max" {
		s.modeWorse = math.Inf(-1)
	}
	s.lastLR = groupLRs(opt)
	s.best = s.modeWorse
	return s, nil
}

// Step does nothing: ReduceLROnPlateau needs a metric (StepMetric).
func (s *ReduceLROnPlateau) Step() {}

func (s *ReduceLROnPlateau) isBetter(a, best float64) bool {
	switch {
	case s.mode == "min" && s.thresholdMode == "rel":
		return a < best*(1.0-s.threshold)
	case s.mode == "min":
		return a < best-s.threshold
	case s.thresholdMode == "rel":
		return a > best*(s.threshold+1.0)
	}
	return a > best+s.threshold
}

// StepMetric records the epoch's metric and reduces the learning rates on a plateau.
func (s *ReduceLROnPlateau) StepMetric(v float64) {
	s.lastEpoch++
	if s.isBetter(v, s.best) {
		s.best = v
		s.numBadEpoch = 0
	} else {
		s.numBadEpoch++
	}
	if s.cooldownCounter > 0 {
		s.cooldownCounter--
		s.numBadEpoch = 0
	}
	if s.numBadEpoch > s.patience {
		for i, g := range s.opt.ParamGroups() {
			old := g.LR
			nl := math.Max(old*s.factor, s.minLRs[i])
			if old-nl > s.eps {
				g.LR = nl
			}
		}
		s.cooldownCounter = s.cooldown
		s.numBadEpoch = 0
	}
	s.lastLR = groupLRs(s.opt)
}

// StateDict returns PyTorch's ReduceLROnPlateau state dict.
func (s *ReduceLROnPlateau) StateDict() *checkpoint.Dict {
	var defaultMinLR any // None when min_lrs has one value per group
	if s.defaultMinLR != nil {
		defaultMinLR = *s.defaultMinLR
	}
	return dictOf("factor", s.factor, "default_min_lr", defaultMinLR, "min_lrs", anys(s.minLRs),
		"patience", s.patience, "cooldown", s.cooldown, "eps", s.eps, "last_epoch", s.lastEpoch,
		"_last_lr", anys(s.lastLR), "mode_worse", s.modeWorse, "mode", s.mode,
		"threshold", s.threshold, "threshold_mode", s.thresholdMode, "best", s.best,
		"cooldown_counter", s.cooldownCounter, "num_bad_epochs", s.numBadEpoch)
}

// LoadStateDict restores a ReduceLROnPlateau state dict.
func (s *ReduceLROnPlateau) LoadStateDict(sd *checkpoint.Dict) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("optim: ReduceLROnPlateau: load_state_dict: %w", err)
		}
	}()
	fields := []schedField{{"factor", &s.factor}, {"eps", &s.eps}, {"mode_worse", &s.modeWorse},
		{"threshold", &s.threshold}, {"best", &s.best}, {"patience", &s.patience}, {"cooldown", &s.cooldown},
		{"last_epoch", &s.lastEpoch}, {"cooldown_counter", &s.cooldownCounter}, {"num_bad_epochs", &s.numBadEpoch}}
	if err = loadFields(sd, fields); err != nil {
		return err
	}
	if s.minLRs, err = getFloats(sd, "min_lrs"); err != nil {
		return err
	}
	if s.lastLR, err = getFloats(sd, "_last_lr"); err != nil {
		return err
	}
	s.defaultMinLR = nil
	if f, err := getNum(sd, "default_min_lr"); err == nil {
		s.defaultMinLR = &f
	}
	if s.mode, err = checkpoint.GetString(sd, "mode"); err != nil {
		return err
	}
	s.thresholdMode, err = checkpoint.GetString(sd, "threshold_mode")
	return err
}
