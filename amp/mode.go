package amp

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
)

// Mode is a mixed-precision mode. It marshals to the strings config files use ("none",
// "bf16", "fp16"), so a Config holding one reads and writes as before.
type Mode int

// The modes. The zero value is Off, so an unset config field means full precision.
const (
	Off  Mode = iota // float32 throughout
	BF16             // autocast to bfloat16; no loss scaling needed
	FP16             // autocast to float16 with a GradScaler (CUDA only)
)

var modeNames = [...]string{"none", "bf16", "fp16"}

// String returns the mode's config name.
func (m Mode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("amp.Mode(%d)", int(m))
}

// ParseMode reads a config name: "none" (or "", "off", "fp32"), "bf16" or "fp16".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "none", "off", "fp32":
		return Off, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "float16":
		return FP16, nil
	}
	return Off, fmt.Errorf("amp: unknown mode %q (want none, bf16 or fp16)", s)
}

// MarshalText writes the config name.
func (m Mode) MarshalText() ([]byte, error) {
	if m < 0 || int(m) >= len(modeNames) {
		return nil, fmt.Errorf("amp: invalid mode %d", int(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads a config name (see ParseMode).
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// DType returns the dtype autocast runs eligible ops in, and false for Off.
func (m Mode) DType() (torch.DType, bool) {
	switch m {
	case BF16:
		return torch.BFloat16, true
	case FP16:
		return torch.Float16, true
	}
	return torch.Float32, false
}

// NeedsScaler reports whether the mode needs loss scaling (float16's narrow range does).
func (m Mode) NeedsScaler() bool { return m == FP16 }
