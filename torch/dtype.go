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

// dtypeAliases are the names ParseDType accepts besides dtypeNames'.
var dtypeAliases = map[string]DType{
	"float": Float32, "double": Float64, "half": Float16, "long": Int64, "int": Int32, "short": Int16,
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
	if d, ok := dtypeAliases[s]; ok {
		return d, nil
	}
	for d, n := range dtypeNames {
		if n == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("torch: unknown dtype %q (want float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8 or bool)", s)
}

// Elem is the set of Go element types that map directly onto a DType.
type Elem interface {
	~float32 | ~float64 | ~int64 | ~int32 | ~int16 | ~int8 | ~uint8 | ~bool
}

// DTypeOf returns the DType that holds Go values of type T.
func DTypeOf[T Elem]() DType {
	if d, ok := kindDTypes[reflect.TypeFor[T]().Kind()]; ok {
		return d
	}
	return Bool
}

var kindDTypes = map[reflect.Kind]DType{reflect.Float32: Float32, reflect.Float64: Float64, reflect.Int64: Int64,
	reflect.Int32: Int32, reflect.Int16: Int16, reflect.Int8: Int8, reflect.Uint8: Uint8}
