package trainer

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stopsAt feeds values to an EarlyStopping and returns the 1-based check at which it
// stops (0 if it never does).
func stopsAt(e *EarlyStopping, values []float64) int {
	for i, v := range values {
		if stop, _ := e.Check(v); stop {
			return i + 1
		}
	}
	return 0
}

func TestEarlyStoppingLightningSemantics(t *testing.T) {
	cases := []struct {
		name     string
		monitor  string
		patience int
		delta    float64
		values   []float64
		want     int
	}{
		{"loss improves then stalls", "val_loss", 2, 0, []float64{1.0, 0.9, 0.95, 0.91}, 4},
		{"equal is no improvement", "val_loss", 1, 0, []float64{1.0, 1.0}, 2},
		{"improvement resets the wait", "val_loss", 2, 0, []float64{1.0, 1.1, 0.8, 0.85, 0.9}, 5},
		{"min_delta must be exceeded strictly", "val_loss", 1, 0.1, []float64{1.0, 0.9}, 2},
		{"more than min_delta improves", "val_loss", 1, 0.1, []float64{1.0, 0.89, 0.78, 0.70}, 4},
		{"maximised accuracy", "val_acc", 2, 0, []float64{0.5, 0.6, 0.6, 0.59}, 4},
		{"NaN stops at once", "val_loss", 5, 0, []float64{1.0, math.NaN()}, 2},
		{"never stops while improving", "val_acc", 1, 0, []float64{0.1, 0.2, 0.3, 0.4}, 0},
		{"best is not ratcheted by sub-delta gains", "val_acc", 2, 0.05, []float64{0.5, 0.54, 0.58, 0.56, 0.6}, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := NewEarlyStopping(c.monitor, Auto, c.patience, c.delta)
			require.NoError(t, err)
			assert.Equal(t, c.want, stopsAt(e, c.values))
		})
	}
}

func TestEarlyStoppingStateRoundTrips(t *testing.T) {
	a, err := NewEarlyStopping("val_loss", Auto, 3, 0)
	require.NoError(t, err)
	stopsAt(a, []float64{1.0, 0.8, 0.9})
	b, err := NewEarlyStopping("val_loss", Auto, 3, 0)
	require.NoError(t, err)
	require.NoError(t, b.LoadStateDict(a.StateDict()))
	assert.Equal(t, a.Wait, b.Wait)
	assert.Equal(t, a.Best, b.Best)
	// Both continue identically: two more non-improving checks stop both.
	assert.Equal(t, stopsAt(a, []float64{0.85, 0.81}), stopsAt(b, []float64{0.85, 0.81}))
}
