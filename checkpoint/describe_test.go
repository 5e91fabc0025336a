package checkpoint

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// describer renders a value in the canonical form of testdata/interop.py's describe, so
// that a Go value and a torch.load result can be compared exactly.
type describer struct {
	tensors  map[*Tensor]int
	storages map[*Storage]int
}

func describeValue(v any) any {
	d := &describer{tensors: map[*Tensor]int{}, storages: map[*Storage]int{}}
	out := d.value(v)
	// Normalise through JSON so that numbers compare like the decoded Python side.
	b, err := json.Marshal(out)
	if err != nil {
		panic(err)
	}
	var norm any
	if err := json.Unmarshal(b, &norm); err != nil {
		panic(err)
	}
	return norm
}

func (d *describer) value(v any) any {
	switch x := v.(type) {
	case nil:
		return []any{"none"}
	case bool:
		return []any{"bool", x}
	case int64:
		return []any{"int", strconv.FormatInt(x, 10)}
	case *big.Int:
		return []any{"int", x.String()}
	case float64:
		return []any{"float", strconv.FormatUint(math.Float64bits(x), 10)}
	case string:
		return []any{"str", x}
	case []byte:
		return []any{"bytes", hex.EncodeToString(x)}
	case Tuple:
		return []any{"tuple", d.seq(x)}
	case []any:
		return []any{"list", d.seq(x)}
	case *Tensor:
		tid, ok := d.tensors[x]
		if !ok {
			tid = len(d.tensors)
			d.tensors[x] = tid
		}
		sid, ok := d.storages[x.Storage]
		if !ok {
			sid = len(d.storages)
			d.storages[x.Storage] = sid
		}
		strides := x.Strides
		if strides == nil {
			strides = ContiguousStrides(x.Shape)
		}
		return []any{"tensor", tid, x.DType.String(), nonNil(x.Shape), nonNil(strides), x.Offset,
			x.RequiresGrad, sid, hex.EncodeToString(x.Storage.Data)}
	case *Dict:
		items := []any{}
		for k, e := range x.All() {
			items = append(items, []any{d.value(k), d.value(e)})
		}
		if x.Kind == OrderedDict {
			attrs := any([]any{"none"})
			if x.Attrs.Len() > 0 {
				attrs = d.value(x.Attrs)
			}
			return []any{"odict", items, attrs}
		}
		return []any{"dict", items}
	}
	panic(fmt.Sprintf("describe: unexpected %T", v))
}

func nonNil(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func (d *describer) seq(s []any) []any {
	out := make([]any, len(s))
	for i, e := range s {
		out[i] = d.value(e)
	}
	return out
}

func loadJSON(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var v any
	require.NoError(t, json.Unmarshal(b, &v))
	return v
}

// fixtures returns the names of the .pt files in dir that have a .json description.
func fixtures(t *testing.T, dir string) []string {
	t.Helper()
	pts, err := filepath.Glob(filepath.Join(dir, "*.pt"))
	require.NoError(t, err)
	var names []string
	for _, p := range pts {
		if _, err := os.Stat(strings.TrimSuffix(p, ".pt") + ".json"); err == nil {
			names = append(names, strings.TrimSuffix(filepath.Base(p), ".pt"))
		}
	}
	require.NotEmpty(t, names)
	return names
}

// requireReadsExactly reads every fixture in dir and compares it with its description.
func requireReadsExactly(t *testing.T, dir string) map[string]any {
	t.Helper()
	values := map[string]any{}
	for _, name := range fixtures(t, dir) {
		v, err := Read(filepath.Join(dir, name+".pt"))
		require.NoError(t, err, name)
		require.Equal(t, loadJSON(t, filepath.Join(dir, name+".json")), describeValue(v), name)
		values[name] = v
	}
	return values
}
