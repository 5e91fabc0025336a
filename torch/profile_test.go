package torch_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
)

// Profile records the ATen ops a forward and backward ran, with their durations.
func TestProfileRecordsOps(t *testing.T) {
	var evs []torch.ProfileEvent
	var err error
	torch.WithScope(func() {
		a := torch.Randn([]int64{64, 64}, torch.Float32, torch.CPU).SetRequiresGrad(true)
		b := torch.Randn([]int64{64, 64}, torch.Float32, torch.CPU)
		evs, err = torch.Profile(false, func() {
			a.Matmul(b).Sum().Backward()
		})
	})
	require.NoError(t, err)
	names := map[string]bool{}
	for _, e := range evs {
		if e.Kind == torch.ProfiledOp {
			names[e.Name] = true
			assert.False(t, e.OnCUDA)
			assert.GreaterOrEqual(t, e.Duration, time.Duration(0))
		}
	}
	assert.True(t, names["aten::mm"] || names["aten::matmul"], "ops recorded: %v", names)
	var backward bool
	for n := range names {
		backward = backward || strings.Contains(n, "Backward")
	}
	assert.True(t, backward, "the backward's autograd nodes are recorded: %v", names)
	// and nothing is recorded once it returned.
	evs, err = torch.Profile(false, func() {})
	require.NoError(t, err)
	for _, e := range evs {
		assert.NotEqual(t, "aten::mm", e.Name)
	}
}
