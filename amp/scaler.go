package amp

import (
	"errors"
	"fmt"
	"math"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/optim"
)

// ScalerOptions are torch.amp.GradScaler's arguments. Zero values mean PyTorch's
// defaults: InitScale 2^16, GrowthFactor 2, BackoffFactor 0.5, GrowthInterval 2000.
// Enabled false makes a pass-through scaler.
type ScalerOptions struct {
	InitScale      float64
	GrowthFactor   float64
	BackoffFactor  float64
	GrowthInterval int64
	Enabled        bool
}

type stage int

const (
	ready stage = iota
	unscaled
	stepped
)

type optState struct {
	stage    stage
	foundInf *torch.Tensor // nil until unscaled
}

// GradScaler is torch.amp.GradScaler: it multiplies the loss by a scale so that float16
// gradients do not underflow, unscales the gradients before the optimizer step, skips
// the step when a gradient is inf or NaN, and adapts the scale (halving it on overflow,
// doubling it after GrowthInterval clean steps), with ATen's own kernels
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_), one call each.
// The scale lives on the loss's device, created at the first ScaleLoss.
type GradScaler struct {
	enabled         bool
	initScale       float64
	growth, backoff float64
	interval        int64
	initTracker     int64
	scale, tracker  *torch.Tensor
	per             map[optim.Optimizer]*optState
	order           []optim.Optimizer
	lastSkipped     bool
}

// NewGradScaler returns a GradScaler with o's settings. It returns an error naming the
// argument if GrowthFactor is not above 1 or BackoffFactor not below 1, as PyTorch's
// constructor asserts, or if InitScale, BackoffFactor or GrowthInterval is negative or
// a factor is not a finite number (a scale that PyTorch would only find wrong later).
func NewGradScaler(o ScalerOptions) (*GradScaler, error) {
	s := &GradScaler{enabled: o.Enabled, initScale: o.InitScale, growth: o.GrowthFactor, backoff: o.BackoffFactor,
		interval: o.GrowthInterval, per: map[optim.Optimizer]*optState{}}
	if s.initScale == 0 {
		s.initScale = 65536
	}
	if s.growth == 0 {
		s.growth = 2
	}
	if s.backoff == 0 {
		s.backoff = 0.5
	}
	if s.interval == 0 {
		s.interval = 2000
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(s.initScale > 0) || !finite(s.initScale):
		return nil, fmt.Errorf("amp: GradScaler: init_scale must be a finite number > 0, got %v", s.initScale)
	case !(s.growth > 1) || !finite(s.growth):
		return nil, fmt.Errorf("amp: GradScaler: growth_factor must be a finite number > 1, got %v", s.growth)
	case !(s.backoff > 0 && s.backoff < 1):
		return nil, fmt.Errorf("amp: GradScaler: backoff_factor must be in (0, 1), got %v", s.backoff)
	case s.interval < 1:
		return nil, fmt.Errorf("amp: GradScaler: growth_interval must be >= 1, got %d", s.interval)
	}
	return s, nil
}

// Enabled reports whether the scaler scales; a disabled scaler passes everything through.
func (s *GradScaler) Enabled() bool { return s.enabled }

// ScaleLoss returns loss multiplied by the current scale (the loss itself when
// disabled). The result belongs to the current scope.
func (s *GradScaler) ScaleLoss(loss *torch.Tensor) *torch.Tensor {
	if !s.enabled {
		return loss
	}
	if s.scale == nil {
		dev := loss.Device()
		s.scale = torch.Full(nil, s.initScale, torch.Float32, dev).Escape()
		s.tracker = torch.Full(nil, float64(s.initTracker), torch.Int32, dev).Escape()
	}
	return loss.Mul(s.scale)
}

func (s *GradScaler) state(o optim.Optimizer) *optState {
	st, ok := s.per[o]
	if !ok {
		st = &optState{}
		s.per[o] = st
		s.order = append(s.order, o)
	}
	return st
}

// Unscale divides opt's gradients by the scale in place and records whether any was inf
// or NaN (GradScaler.unscale_). Call it at most once per optimizer between updates, after
// all gradient accumulation and before clipping; Step calls it when you did not.
func (s *GradScaler) Unscale(opt optim.Optimizer) error {
	if !s.enabled {
		return nil
	}
	st := s.state(opt)
	switch st.stage {
	case unscaled:
		return errors.New("amp: unscale_() has already been called on this optimizer since the last update()")
	case stepped:
		return errors.New("amp: unscale_() is being called after step()")
	}
	if s.scale == nil {
		return errors.New("amp: Unscale before ScaleLoss: the scale does not exist yet (did the step use scaler.ScaleLoss?)")
	}
	found, err := torch.AMPUnscale(opt.Params(), s.scale)
	if err != nil {
		return err
	}
	st.foundInf = found
	st.stage = unscaled
	return nil
}

// Step unscales opt's gradients if Unscale was not called, then runs opt.Step() unless a
// gradient was inf or NaN. It reports whether the optimizer stepped. This is one
// device-to-host sync. When disabled it just steps.
func (s *GradScaler) Step(opt optim.Optimizer) (bool, error) {
	if !s.enabled {
		return true, opt.Step()
	}
	st := s.state(opt)
	if st.stage == stepped {
		return false, errors.New("amp: step() has already been called since the last update()")
	}
	if st.stage == ready {
		if err := s.Unscale(opt); err != nil {
			return false, err
		}
	}
	found := st.foundInf.Item() != 0
	st.stage = stepped
	s.lastSkipped = found
	if found {
		return false, nil
	}
	return true, opt.Step()
}

// LastStepSkipped reports whether the last Step skipped its optimizer step because of
// an inf or NaN gradient.
func (s *GradScaler) LastStepSkipped() bool { return s.lastSkipped }

// Update adapts the scale once per iteration, after every optimizer's Step
// (GradScaler.update): it multiplies the scale by BackoffFactor if any unscaled gradient
// was inf or NaN, and by GrowthFactor after GrowthInterval consecutive clean iterations
// (never growing to inf). It then readies every optimizer for the next iteration.
func (s *GradScaler) Update() error {
	if !s.enabled || s.scale == nil {
		return nil
	}
	var found []*torch.Tensor
	for _, o := range s.order {
		if st := s.per[o]; st.foundInf != nil {
			found = append(found, st.foundInf)
		}
	}
	defer s.reset()
	if len(found) == 0 {
		return errors.New("amp: no inf checks were recorded prior to update")
	}
	return torch.AMPUpdateScale(s.scale, s.tracker, found, s.growth, s.backoff, s.interval)
}

func (s *GradScaler) reset() {
	for _, st := range s.per {
		st.foundInf.Free()
	}
	s.per = map[optim.Optimizer]*optState{}
	s.order = nil
}

// SetScale replaces the scale (GradScaler.update(new_scale)) and readies every optimizer.
func (s *GradScaler) SetScale(v float64) {
	if !s.enabled {
		return
	}
	if s.scale == nil {
		s.initScale = v
	} else {
		s.scale.Fill(v)
	}
	s.reset()
}

// ScaleValue returns the current scale (get_scale()): the initial scale before the
// first ScaleLoss, and 1 when disabled. It syncs with the device.
func (s *GradScaler) ScaleValue() float64 {
	if !s.enabled {
		return 1
	}
	if s.scale == nil {
		return s.initScale
	}
	return s.scale.Item()
}

// GrowthTracker returns the number of consecutive clean iterations counted toward the
// next growth (_growth_tracker).
func (s *GradScaler) GrowthTracker() int64 {
	if !s.enabled {
		return 0
	}
	if s.tracker == nil {
		return s.initTracker
	}
	return s.tracker.ItemInt()
}

// StateDict returns GradScaler.state_dict()'s five keys (scale, growth_factor,
// backoff_factor, growth_interval, _growth_tracker), or an empty dict when disabled.
// Call it after Update.
func (s *GradScaler) StateDict() *checkpoint.Dict {
	d := checkpoint.NewDict()
	if !s.enabled {
		return d
	}
	d.Set("scale", s.ScaleValue())
	d.Set("growth_factor", s.growth)
	d.Set("backoff_factor", s.backoff)
	d.Set("growth_interval", s.interval)
	d.Set("_growth_tracker", s.GrowthTracker())
	return d
}

// LoadStateDict restores a GradScaler state dict (from StateDict or Python). It does
// nothing when the scaler is disabled; an empty dict, saved by a disabled scaler, is an
// error for an enabled one.
func (s *GradScaler) LoadStateDict(sd *checkpoint.Dict) error {
	if !s.enabled {
		return nil
	}
	if sd == nil || sd.Len() == 0 {
		return errors.New("amp: the source state dict is empty, possibly because it was saved from a disabled instance of GradScaler")
	}
	var vals [5]float64
	for i, k := range []string{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} {
		v, err := checkpoint.GetFloat(sd, k)
		if err != nil {
			return fmt.Errorf("amp: GradScaler state dict: %w", err)
		}
		vals[i] = v
	}
	s.initScale, s.growth, s.backoff = vals[0], vals[1], vals[2]
	s.interval, s.initTracker = int64(vals[3]), int64(vals[4])
	if s.scale != nil {
		s.scale.Fill(s.initScale)
		s.tracker.Fill(float64(s.initTracker))
	}
	return nil
}
