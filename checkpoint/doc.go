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
// (also with mmap=True).
//
// Safetensors files are read and written one by one (ReadSafetensors,
// WriteSafetensors) or as a Hugging Face directory's weights (ReadSafetensorsDir,
// WriteSafetensorsDir): model.safetensors, or shards model-00001-of-0000N.safetensors
// with model.safetensors.index.json, split by transformers' rule; adapter_model.safetensors
// for a PEFT adapter. MapSafetensors and MapSafetensorsDir check the same rules and
// leave the tensors' bytes in read-only memory maps of the files (a Mapping, closed
// once they are copied), so that loading a model never holds its files in Go's heap.
//
// Read accepts what torch.save writes, including the legacy pre-1.6 format. Its pickle
// machine resolves globals through an allowlist (tensor and storage rebuilders,
// OrderedDict, torch.Size); any other global is an error naming it, and no object is
// ever constructed from an unknown class.
//
// # Read budget
//
// A file of n bytes is read within a budget, whatever it holds, or refused with a
// *LimitError that names the limit and the ReadOptions field raising it:
//
//   - memory: at most DefaultMemoryFixed + DefaultMemoryPerByte·n bytes are allocated
//     (16 MiB + 64·n). Every allocation is charged before it is made: records, the
//     pickle's values one by one (so millions of one-byte values cost what they
//     really cost), dict entries and key normalisation, slices' growth. Sizes the
//     file claims (records, storages, strings, safetensors headers) are checked against
//     the file before anything is allocated. Real checkpoints need about 2·n.
//   - time: at most DefaultWorkFixed + DefaultWorkPerByte·n units of work (about one
//     byte processed each: opcodes, bytes copied, scanned or hashed, values visited),
//     so time is linear in n. A key shared through the pickle memo costs its length at
//     every use; integers are limited to what torch's weights_only unpickler reads
//     (LONG1, 255 bytes) and text integers to Python's 4300 digits.
//   - sharing: the value returned keeps the file's sharing (a string or container stored
//     once and referenced many times is one Go value), and Write keeps it too, so
//     Write(Read(f)) is about f's size. Programs that walk a value as a tree copy shared
//     parts, so a value whose expanded tree exceeds ReadOptions.MaxExpanded (default: the
//     memory budget) is refused; a caller that visits shared parts once can lift it.
//   - safetensors headers (at most 100 MB, the reference implementation's limit) are
//     read as a stream and checked value by value: a name past 64 KiB, a shape past
//     1024 dimensions, a number that is not a non-negative int64, or an entry past
//     ReadOptions.MaxHeaderEntries (default DefaultMaxHeaderEntries, tensors and
//     metadata keys together) is refused as it is read, so a hostile header costs a
//     few megabytes whatever it goes on to hold. A sharded model's index is read the
//     same way.
//   - views: a tensor may be a view with zero or overlapping strides (torch's expand)
//     addressing far more elements than its storage holds; it reads and writes back as
//     a view, and its accessors (ReadBytes, ReadFloat64s, ...) materialise it up to
//     the budget of its storage's size and return an error beyond, never panic.
//
// A legacy file's pickles have no length prefix: they are read up to 256 MiB, so a
// pickle that never ends cannot make the reader buffer a (sparse) file of any size.
//
// # What torch reads is what Read reads
//
// Where a file could be read two ways, Read does what torch 2.14's reader does or
// refuses the file:
//
//   - zip structure: the zip directory is parsed by the package itself; the end record
//     must end the file and the central directory sit where it says (no "base offset"
//     guessing, which Go's archive/zip does and torch's miniz does not), each entry
//     must point at a local header of the same name, and no two records may overlap,
//     so no byte is read as part of two records.
//   - names: torch finds records by a binary search over ASCII-case-folded names.
//     Read finds them the same way ("DATA.PKL" is data.pkl) and refuses a file with two
//     records whose names fold alike, since which one torch reads then depends on the
//     search (two data.pkl records are refused, whatever they hold). A file without a
//     version record, or with one outside 1-10, is refused as torch refuses it.
//   - legacy files: torch reads the storages in the order of the key list; a key listed
//     twice (read twice, overwriting) or a storage not listed (left uninitialised) is
//     refused.
//   - keys compare as in Python: 1, 1.0 and True are one key, as are 0, -0.0 and False
//     and tuples of equal elements; the first key is kept with the last value. NaN keys
//     are refused (Python tells them apart by object identity).
//   - BUILD on an OrderedDict takes a dict (torch's __dict__.update would read a tuple as
//     pairs); tensors with backward hooks or metadata and parameters with state are
//     refused rather than read without them.
//
// Write replaces its target atomically, removes its temporary file on any failure
// (panics included), gives a new file the permissions os.Create would (0666 less the
// umask), and writes through a symlink to the file it names, keeping the link.
// WriteSafetensorsDir, which fills a directory, replaces a symlink among its files
// instead (fsutil.StageInDir).
package checkpoint
