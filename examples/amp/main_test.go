package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/amp"
)

func TestAMPExampleRuns(t *testing.T) {
	require.NoError(t, run(true, 512, 1, amp.BF16, "cpu", t.TempDir()))
}
