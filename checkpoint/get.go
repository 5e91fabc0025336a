package checkpoint

import (
	"fmt"
	"math/big"
	"strings"
)

// PathError reports a failed lookup by Get or a typed getter; Path is where it failed.
type PathError struct {
	Path string
	Err  string
}

// Error implements error.
func (e *PathError) Error() string {
	if e.Path == "" {
		return "checkpoint: " + e.Err
	}
	return "checkpoint: " + e.Path + ": " + e.Err
}

func formatPath(path []any) string {
	var sb strings.Builder
	for i, p := range path {
		if s, ok := p.(string); ok && i == 0 {
			sb.WriteString(s)
			continue
		}
		if s, ok := p.(string); ok {
			sb.WriteString("." + s)
			continue
		}
		fmt.Fprintf(&sb, "[%v]", p)
	}
	return sb.String()
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case *Dict:
		if x.Kind == OrderedDict {
			return "OrderedDict"
		}
		return "dict"
	case []any:
		return "list"
	case Tuple:
		return "tuple"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case bool:
		return "bool"
	case []byte:
		return "bytes"
	case *Tensor:
		return "tensor"
	case DType:
		return "dtype"
	}
	return fmt.Sprintf("%T", v)
}

// Get walks v along path: a string or integer step looks up a dict key, an integer
// step indexes a list or tuple (negative counts from the end, as in Python). For
// example Get(ckpt, "optimizer_state_dict", "state", 0, "exp_avg").
func Get(v any, path ...any) (any, error) {
	cur := v
	for i, step := range path {
		switch c := cur.(type) {
		case *Dict:
			next, ok := c.Get(step)
			if !ok {
				return nil, &PathError{formatPath(path[:i]), fmt.Sprintf("key %s not found", fmtKey(step))}
			}
			cur = next
		case []any, Tuple:
			seq := asSeq(c)
			n, ok := toInt(step)
			if !ok {
				return nil, &PathError{formatPath(path[:i]), fmt.Sprintf("cannot index a %s with %v", describe(c), fmtKey(step))}
			}
			if n < 0 {
				n += int64(len(seq))
			}
			if n < 0 || n >= int64(len(seq)) {
				return nil, &PathError{formatPath(path[:i]), fmt.Sprintf("index %v out of range (length %d)", step, len(seq))}
			}
			cur = seq[n]
		default:
			return nil, &PathError{formatPath(path[:i]), fmt.Sprintf("cannot look up %s in a %s", fmtKey(step), describe(cur))}
		}
	}
	return cur, nil
}

func asSeq(v any) []any {
	switch s := v.(type) {
	case []any:
		return s
	case Tuple:
		return s
	}
	return nil
}

func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case int32:
		return int64(n), true
	}
	return 0, false
}

func getAs[T any](v any, path []any, want string, conv func(any) (T, bool)) (T, error) {
	var zero T
	x, err := Get(v, path...)
	if err != nil {
		return zero, err
	}
	out, ok := conv(x)
	if !ok {
		return zero, &PathError{formatPath(path), fmt.Sprintf("is a %s, not %s", describe(x), want)}
	}
	return out, nil
}

// GetTensor returns the tensor at path.
func GetTensor(v any, path ...any) (*Tensor, error) {
	return getAs(v, path, "a tensor", func(x any) (*Tensor, bool) { t, ok := x.(*Tensor); return t, ok })
}

// GetInt returns the int at path; it fails for ints outside the int64 range and for bools.
func GetInt(v any, path ...any) (int64, error) {
	return getAs(v, path, "an int64", func(x any) (int64, bool) { n, ok := x.(int64); return n, ok })
}

// GetFloat returns the number at path as a float64; like Python, it accepts an int.
func GetFloat(v any, path ...any) (float64, error) {
	return getAs(v, path, "a float", func(x any) (float64, bool) {
		switch n := x.(type) {
		case float64:
			return n, true
		case int64:
			return float64(n), true
		}
		return 0, false
	})
}

// GetString returns the string at path.
func GetString(v any, path ...any) (string, error) {
	return getAs(v, path, "a str", func(x any) (string, bool) { s, ok := x.(string); return s, ok })
}

// GetBool returns the bool at path.
func GetBool(v any, path ...any) (bool, error) {
	return getAs(v, path, "a bool", func(x any) (bool, bool) { b, ok := x.(bool); return b, ok })
}

// GetDict returns the dict (or OrderedDict) at path.
func GetDict(v any, path ...any) (*Dict, error) {
	return getAs(v, path, "a dict", func(x any) (*Dict, bool) { d, ok := x.(*Dict); return d, ok })
}

// GetList returns the list or tuple at path as a slice.
func GetList(v any, path ...any) ([]any, error) {
	return getAs(v, path, "a list", func(x any) ([]any, bool) {
		switch s := x.(type) {
		case []any:
			return s, true
		case Tuple:
			return s, true
		}
		return nil, false
	})
}
