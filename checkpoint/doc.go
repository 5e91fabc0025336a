// Package checkpoint reads and writes PyTorch checkpoints (the files of torch.save and
// torch.load) and safetensors files in pure Go, without libtorch and without trusting
// the file.
//
// A checkpoint holds a tree of Python values. They map to Go as follows:
//
//	Python                      Go
//	dict                        *Dict (Kind == PlainDict), insertion-ordered
//	collections.OrderedDict     *Dict (Kind == OrderedDict), Attrs holds e.g. _metadata
//	list                        []any
//	tuple                       Tuple
//	int                         int64, or *big.Int outside the int64 range
//	float                       float64
//	bool, None, str, bytes      bool, nil, string, []byte
//	torch.Tensor                *Tensor (sharing a *Storage with its views)
//	torch.float16 (a dtype)     DType
//
// Tensors may have any dtype torch.save writes to a CPU file: float64/32/16, bfloat16,
// int64/32/16/8, uint64/32/16/8, bool, complex128/64 and float8_e4m3fn/e5m2 (the ones
// added in torch 2.1-2.3 as torch writes them, with _rebuild_tensor_v3 over an
// UntypedStorage). Float64s decodes every one of them (complex: the real part;
// Complex128s has both).
//
// Writing also accepts Go conveniences: ints and floats of any size, Dict by value,
// slices of any element type (as lists) and maps with string keys (as dicts, in sorted
// key order). Values nested deeper than 1000 levels (or cyclic) are refused.
//
// Write produces what torch.save produces: a zip archive with 64-byte aligned, stored
// records and a protocol-2 pickle that uses only the opcodes and globals that
// torch.load(weights_only=True) accepts, so Python loads it with its default settings
// (also with mmap=True). Write replaces the target atomically.
//
// Read accepts what torch.save writes, including the legacy pre-1.6 format. Its pickle
// machine resolves globals through an allowlist (tensor and storage rebuilders,
// OrderedDict, torch.Size); any other global is an error naming it, and no object is
// ever constructed from an unknown class. Sizes are checked against the file before
// anything is allocated, so a malformed or hostile file yields an error, not a panic or
// a huge allocation.
package checkpoint
