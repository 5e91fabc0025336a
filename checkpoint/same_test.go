package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"testing"
	"unsafe"
)

func jsonDecode(b []byte, v any) error { return json.Unmarshal(b, v) }

// sameValue compares two values read from checkpoints: container kinds and order, key
// and value types, float bits, tensors' dtype, view and bytes, and the sharing of
// storages (one-to-one). It visits each pair of shared containers once, so it takes
// time linear in the values, not in their expanded trees.
type sameValue struct {
	pairs    map[[2]unsafe.Pointer]bool
	storages map[*Storage]*Storage
}

func newSameValue() *sameValue {
	return &sameValue{pairs: map[[2]unsafe.Pointer]bool{}, storages: map[*Storage]*Storage{}}
}

func (s *sameValue) seen(a, b unsafe.Pointer) bool {
	k := [2]unsafe.Pointer{a, b}
	if s.pairs[k] {
		return true
	}
	s.pairs[k] = true
	return false
}

func (s *sameValue) compare(a, b any, path string) error {
	switch x := a.(type) {
	case nil, bool, int64, string, DType:
		if a != b {
			return fmt.Errorf("%s: %v != %v", path, a, b)
		}
	case float64:
		y, ok := b.(float64)
		if !ok || math.Float64bits(x) != math.Float64bits(y) {
			return fmt.Errorf("%s: %v != %v", path, a, b)
		}
	case *big.Int:
		y, ok := b.(*big.Int)
		if !ok || x.Cmp(y) != 0 {
			return fmt.Errorf("%s: %v != %v", path, a, b)
		}
	case []byte:
		y, ok := b.([]byte)
		if !ok || !bytes.Equal(x, y) {
			return fmt.Errorf("%s: bytes differ", path)
		}
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Errorf("%s: list vs %T", path, b)
		}
		return s.seq(x, y, path)
	case Tuple:
		y, ok := b.(Tuple)
		if !ok || len(x) != len(y) {
			return fmt.Errorf("%s: tuple vs %T", path, b)
		}
		return s.seq(x, y, path)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Kind != y.Kind || x.Len() != y.Len() || x.Attrs.Len() != y.Attrs.Len() {
			return fmt.Errorf("%s: dict vs %T", path, b)
		}
		if s.seen(unsafe.Pointer(x), unsafe.Pointer(y)) {
			return nil
		}
		for i := range x.keys {
			if err := s.compare(x.keys[i], y.keys[i], path+"{key}"); err != nil {
				return err
			}
			if err := s.compare(x.vals[i], y.vals[i], fmt.Sprintf("%s[%v]", path, fmtKey(x.keys[i]))); err != nil {
				return err
			}
		}
		if x.Attrs.Len() > 0 {
			return s.compare(x.Attrs, y.Attrs, path+".attrs")
		}
	case *Tensor:
		y, ok := b.(*Tensor)
		if !ok || x.DType != y.DType || !slices.Equal(x.Shape, y.Shape) || !slices.Equal(x.Strides, y.Strides) ||
			x.Offset != y.Offset || x.RequiresGrad != y.RequiresGrad || !bytes.Equal(x.Storage.Data, y.Storage.Data) {
			return fmt.Errorf("%s: tensors differ: %v vs %v", path, a, b)
		}
		if m, ok := s.storages[x.Storage]; ok && m != y.Storage {
			return fmt.Errorf("%s: storage sharing differs", path)
		}
		s.storages[x.Storage] = y.Storage
	default:
		return fmt.Errorf("%s: unexpected %T", path, a)
	}
	return nil
}

func (s *sameValue) seq(x, y []any, path string) error {
	if len(x) == 0 || s.seen(unsafe.Pointer(&x[0]), unsafe.Pointer(&y[0])) {
		return nil
	}
	for i := range x {
		if err := s.compare(x[i], y[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	return nil
}

func requireSameValue(t *testing.T, want, got any) {
	t.Helper()
	if err := newSameValue().compare(want, got, "value"); err != nil {
		t.Fatal(err)
	}
}
