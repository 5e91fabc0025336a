package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/gotrain/gotrain/checkpoint"

	"github.com/stretchr/testify/require"
)

func TestPrint(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "../../checkpoint/testdata/training_checkpoint.pt", options{}))
	s := out.String()
	for _, want := range []string{
		"dict (15 items)\n",
		"  'model_state_dict': OrderedDict (9 items)\n",
		"    '0.weight': tensor float32 [8, 4]\n",
		"        'step': tensor float32 [] = 2.0\n",
		"        'betas': (0.9, 0.999)\n",
		"  'global_step': 1099511627776\n",
		"  'best_metric': 0.8125\n",
		"    'name': 'run-é'\n",
		"    (1, 'a'): 'tuple key'\n",
	} {
		require.Contains(t, s, want)
	}
}

func TestJSON(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, "../../checkpoint/testdata/views.pt", options{json: true}))
	var v struct {
		Type  string
		Items []struct {
			Key   struct{ Value string }
			Value struct {
				Type    string
				DType   string
				Shape   []int64
				Strides []int64
				Offset  int64
			}
		}
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &v))
	require.Equal(t, "dict", v.Type)
	require.Equal(t, "t", v.Items[1].Key.Value)
	require.Equal(t, "float32", v.Items[1].Value.DType)
	require.Equal(t, []int64{4, 3}, v.Items[1].Value.Shape)
	require.Equal(t, []int64{1, 4}, v.Items[1].Value.Strides)
}

func TestNotACheckpoint(t *testing.T) {
	var out bytes.Buffer
	require.Error(t, run(&out, "main.go", options{}))
}

func TestSafetensors(t *testing.T) {
	d := checkpoint.NewDict()
	d.Set("w", checkpoint.NewTensor(checkpoint.Int16, []int64{2}, []byte{1, 0, 0xff, 0xff}))
	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, checkpoint.WriteSafetensors(path, d, map[string]string{"format": "pt"}))
	var out bytes.Buffer
	require.NoError(t, run(&out, path, options{}))
	require.Contains(t, out.String(), "'w': tensor int16 [2] = [1, -1]\n")
	require.Contains(t, out.String(), "'format': 'pt'\n")
}
