package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/stretchr/testify/require"
)

// runInterop runs testdata/interop.py with the project's torch (python == "") or with
// the given interpreter.
func runInterop(t *testing.T, python string, args ...string) string {
	t.Helper()
	script, err := os.ReadFile("testdata/interop.py")
	require.NoError(t, err)
	if python == "" {
		return string(testpy.Run(t, string(script), []string{"torch"}, args...))
	}
	out, err := exec.Command(python, append([]string{"-c", string(script)}, args...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

func f32s(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// goCheckpoint builds a training checkpoint with the Go API alone.
func goCheckpoint() *Dict {
	model := NewOrderedDict()
	w := NewTensor(Float32, []int64{2, 3}, f32s(1, 2, 3, 4, 5, 6))
	model.Set("fc.weight", w)
	model.Set("fc.bias", NewTensor(Float32, []int64{2}, f32s(0.5, -0.5)))
	model.Set("bn.num_batches_tracked", NewTensor(Int64, nil, binary.LittleEndian.AppendUint64(nil, 7)))
	meta := NewOrderedDict()
	meta.Set("", map[string]any{"version": 1})
	meta.Set("fc", map[string]any{"version": 1})
	model.Attrs = NewDict()
	model.Attrs.Set("_metadata", meta)

	state := NewDict()
	st0 := NewDict()
	st0.Set("step", NewTensor(Float32, nil, f32s(3)))
	st0.Set("exp_avg", &Tensor{DType: Float32, Shape: []int64{3, 2}, Strides: []int64{1, 3}, Storage: w.Storage})
	st0.Set("exp_avg_sq", NewTensor(BFloat16, []int64{2}, []byte{0x80, 0x3f, 0x00, 0xc0}))
	state.Set(0, st0)
	opt := NewDict()
	opt.Set("state", state)
	opt.Set("param_groups", []any{map[string]any{
		"lr": 1e-3, "betas": Tuple{0.9, 0.999}, "eps": 1e-8, "weight_decay": 0.01,
		"amsgrad": false, "foreach": nil, "params": []int{0, 1},
	}})

	ck := NewDict()
	ck.Set("epoch", 3)
	ck.Set("global_step", int64(1)<<40)
	ck.Set("huge", new(big.Int).Lsh(big.NewInt(-1), 70))
	ck.Set("best_metric", 0.8125)
	ck.Set("model_state_dict", model)
	ck.Set("optimizer_state_dict", opt)
	ck.Set("history", []any{map[string]any{"epoch": 1, "loss": 1.5}})
	ck.Set("name", "run-é")
	ck.Set("same", w)
	ck.Set("empty", NewTensor(Int8, []int64{0, 4}, nil))
	ck.Set("bytes", []byte{0, 255, 'a'})
	ck.Set("dtypes", []any{
		NewTensor(Float64, []int64{1}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(-0.0))),
		NewTensor(Float16, []int64{1}, []byte{0x00, 0x3c}),
		NewTensor(Int32, []int64{1}, []byte{1, 2, 3, 4}),
		NewTensor(Int16, []int64{1}, []byte{0xff, 0xff}),
		NewTensor(Uint8, []int64{2}, []byte{0, 255}),
		NewTensor(Bool, []int64{2}, []byte{1, 0}),
	})
	ck.Set(Tuple{int64(1), "a"}, "tuple key")
	return ck
}

// TestInteropPython: files written by the pinned torch are read exactly, and what Go
// writes (those values again, and a checkpoint built in Go) loads in torch with the
// default weights_only=True and with mmap=True, value by value and dtype by dtype.
// With GOTRAIN_PYTHON26 set to a torch 2.6 interpreter the same runs against it too.
func TestInteropPython(t *testing.T) {
	pythons := map[string]string{"pinned": ""}
	if py := os.Getenv("GOTRAIN_PYTHON26"); py != "" {
		pythons["torch2.6"] = py
	}
	for label, py := range pythons {
		t.Run(label, func(t *testing.T) {
			if py == "" {
				testpy.Python(t, "torch")
			}
			dir := t.TempDir()
			runInterop(t, py, "gen", dir)
			values := requireReadsExactly(t, dir)
			requireNewDTypeValues(t, values["new_dtypes"])

			var args []string
			for name, v := range values {
				p := filepath.Join(dir, "go_"+name+".pt")
				require.NoError(t, Write(p, v))
				args = append(args, p, filepath.Join(dir, name+".json"))
			}
			ck := goCheckpoint()
			p := filepath.Join(dir, "go_built.pt")
			require.NoError(t, Write(p, ck))
			// Describe what Go reads back: the Go types (int, maps, []int) are normalised.
			back, err := Read(p)
			require.NoError(t, err)
			desc, err := json.Marshal(describeValue(back))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go_built.json"), desc, 0o644))
			args = append(args, p, filepath.Join(dir, "go_built.json"))

			out := runInterop(t, py, append([]string{"check"}, args...)...)
			t.Log(out)
		})
	}
}

// requireNewDTypeValues compares the elements Go decodes from the new_dtypes fixture
// (uint16/32/64 as decimal strings, float8 as Python floats, complex as [re, im]) with
// the numbers Python wrote beside them.
func requireNewDTypeValues(t *testing.T, v any) {
	t.Helper()
	want, err := GetDict(v, "values")
	require.NoError(t, err)
	for k, w := range want.All() {
		name := k.(string)
		tn, err := GetTensor(v, name)
		require.NoError(t, err, name)
		ws := w.([]any)
		switch {
		case tn.DType == Complex64 || tn.DType == Complex128:
			got := tn.Complex128s()
			require.Len(t, got, len(ws), name)
			for i, e := range ws {
				p := e.([]any)
				require.Equal(t, complex(p[0].(float64), p[1].(float64)), got[i], "%s[%d]", name, i)
			}
		case tn.DType == Float8E4M3FN || tn.DType == Float8E5M2:
			got := tn.Float64s()
			require.Len(t, got, len(ws), name)
			for i, e := range ws {
				f := e.(float64)
				if math.IsNaN(f) {
					require.True(t, math.IsNaN(got[i]), "%s[%d] = %v, want NaN", name, i, got[i])
					continue
				}
				require.Equal(t, math.Float64bits(f), math.Float64bits(got[i]), "%s[%d] = %v, want %v", name, i, got[i], f)
			}
		default: // unsigned integers, exactly
			b := tn.Bytes()
			es := tn.DType.ElemSize()
			require.Len(t, b, es*len(ws), name)
			for i, e := range ws {
				var u uint64
				switch es {
				case 2:
					u = uint64(binary.LittleEndian.Uint16(b[i*es:]))
				case 4:
					u = uint64(binary.LittleEndian.Uint32(b[i*es:]))
				case 8:
					u = binary.LittleEndian.Uint64(b[i*es:])
				}
				require.Equal(t, e.(string), strconv.FormatUint(u, 10), "%s[%d]", name, i)
			}
		}
	}
}
