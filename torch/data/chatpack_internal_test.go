package data

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPackBestFitDecreasing: the longest item first, each into the bin it leaves the
// least room in, bins in the order they opened, items in index order.
func TestPackBestFitDecreasing(t *testing.T) {
	// 7 opens a bin (room 3), 5 another (5), 5 fills it, 4 fits neither (4 opens a third,
	// room 6), 4 goes there (2), 3 fills the first and 2 the third: every bin full.
	assert.Equal(t, [][]int{{0, 1}, {2, 3}, {4, 5, 6}}, packBestFitDecreasing([]int{3, 7, 5, 5, 2, 4, 4}, 10))
	// Filling in file order would need three windows (6 | 5 4 | 5).
	assert.Equal(t, [][]int{{0, 2}, {1, 3}}, packBestFitDecreasing([]int{6, 5, 4, 5}, 10))
	// Best fit, not first fit: 1 goes into the bin of 4+4 (room 2), not 7's (room 3).
	assert.Equal(t, [][]int{{3}, {0, 1, 2}}, packBestFitDecreasing([]int{1, 4, 4, 7}, 10))
	assert.Equal(t, [][]int{{0}, {1}}, packBestFitDecreasing([]int{10, 10}, 10))
	assert.Empty(t, packBestFitDecreasing(nil, 10))
}
