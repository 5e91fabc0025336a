package models

import (
	"fmt"
	"math"
	"syscall"
)

// The largest sizes a config may give: a few times those of today's largest open
// models, so that a typo or a hostile file (vocab_size 2^40) is refused before any
// arithmetic on it can overflow or any allocation is tried.
const (
	maxVocab        = 1 << 24
	maxPositions    = 1 << 24
	maxHidden       = 1 << 17
	maxIntermediate = 1 << 19
	maxLayers       = 1 << 10
)

// configSize is one size field of a config with its allowed range.
type configSize struct {
	name     string
	v        int64
	min, max int64
}

// checkSizes returns an error naming the first size outside its range.
func checkSizes(cfg string, sizes ...configSize) error {
	for _, s := range sizes {
		if s.v < s.min || s.v > s.max {
			return fmt.Errorf("%s: %s %d is outside [%d, %d]", cfg, s.name, s.v, s.min, s.max)
		}
	}
	return nil
}

// probability is one dropout probability of a config, with its field's name.
type probability struct {
	name string
	p    float64
}

// checkProbability refuses the first dropout probability outside [0, 1].
func checkProbability(cfg string, ps ...probability) error {
	for _, p := range ps {
		if !(p.p >= 0 && p.p <= 1) {
			return fmt.Errorf("%s: %s %g is not a probability in [0, 1]", cfg, p.name, p.p)
		}
	}
	return nil
}

// checkFits refuses a model of params float32 parameters that would not fit in this
// machine's memory, before it is built. With the sizes checkSizes allows, params
// cannot overflow.
func checkFits(cfg string, params int64) error {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return nil
	}
	total := float64(si.Totalram) * float64(si.Unit)
	need := float64(params) * 4
	if need > total {
		return fmt.Errorf("%s: %.3g parameters need %.1f GiB in float32, more than this machine's %.1f GiB of memory",
			cfg, float64(params), need/math.Exp2(30), total/math.Exp2(30))
	}
	return nil
}
