package trainer

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestGroupDigits: the announce's parameter counts read as PEFT's
// print_trainable_parameters writes them (Python's format(n, ",d")).
func TestGroupDigits(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 134978304: "134,978,304", -1234567: "-1,234,567"} {
		assert.Equal(t, want, groupDigits(n), "%d", n)
	}
}
