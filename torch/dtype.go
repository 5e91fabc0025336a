package torch

import (
	"fmt"
	"reflect"
)

// DType is a tensor element type. Its values are libtorch's ScalarType numbers.
type DType int

// The supported element types.
const (
	Uint8    DType = 0
	Int8     DType = 1
	Int16    DType = 2
	Int32    DType = 3
	Int64    DType = 4
	Float16  DType = 5
	Float32  DType = 6
	Float64  DType = 7
	Bool     DType = 11
	BFloat16 DType = 15
)

var dtypeNames = map[DType]string{
	Uint8: "uint8", Int8: "int8", Int16: "int16", Int32: "int32", Int64: "int64",
	Float16: "float16", Float32: "float32", Float64: "float64", Bool: "bool", BFloat16: "bfloat16",
}

var dtypeSizes = map[DType]int{
	Uint8: 1, Int8: 1, Int16: 2, Int32: 4, Int64: 8, Float16: 2, Float32: 4, Float64: 8, Bool: 1, BFloat16: 2,
}

// String returns PyTorch's name without the "torch." prefix, e.g. "float32".
func (d DType) String() string {
	if n, ok := dtypeNames[d]; ok {
		return n
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// Size returns the size of one element in bytes.
func (d DType) Size() int { return dtypeSizes[d] }

// IsFloatingPoint reports whether d is a floating-point type.
func (d DType) IsFloatingPoint() bool {
	return d == Float16 || d == Float32 || d == Float64 || d == BFloat16
}

// ParseDType parses a PyTorch dtype name ("float32", "torch.float32", "float", "long", ...).
func ParseDType(s string) (DType, error) {
	if len(s) > 6 && s[:6] == "torch." {
		s = s[6:]
	}
	switch s {
	case "float", "float32":
		return Float32, nil
	case "double", "float64":
		return Float64, nil
	case "half", "float16":
		return Float16, nil
	case "bfloat16":
		return BFloat16, nil
	case "long", "int64":
		return Int64, nil
	case "int", "int32":
		return Int32, nil
	case "short", "int16":
		return Int16, nil
	case "int8":
		return Int8, nil
	case "uint8":
		return Uint8, nil
	case "bool":
		return Bool, nil
	}
	return 0, fmt.Errorf("torch: unknown dtype %q (want float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8 or bool)", s)
}

// Elem is the set of Go element types that map directly onto a DType.
type Elem interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~int16 | ~int8 | ~uint8 | ~bool
}

// DTypeOf returns the DType that holds Go values of type T.
func DTypeOf[T Elem]() DType {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Float32:
		return Float32
	case reflect.Float64:
		return Float64
	case reflect.Int64:
		return Int64
	case reflect.Int32:
		return Int32
	case reflect.Int16:
		return Int16
	case reflect.Int8:
		return Int8
	case reflect.Uint8:
		return Uint8
	default:
		return Bool
	}
}
