package loopio

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLoadAvgIsThreeFiguresOrUnknown(t *testing.T) {
	l := LoadAvg()
	if l != "?" {
		assert.Len(t, strings.Fields(l), 3, l)
	}
}
