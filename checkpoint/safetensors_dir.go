package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// The base names of the weights in a Hugging Face directory, for ReadSafetensorsDir and
// WriteSafetensorsDir.
const (
	// ModelWeights names a model's weights as transformers saves them:
	// model.safetensors, or shards model-00001-of-00003.safetensors ... listed in
	// model.safetensors.index.json.
	ModelWeights = "model"
	// AdapterWeights names a PEFT adapter's weights: adapter_model.safetensors.
	AdapterWeights = "adapter_model"
)

// ReadSafetensorsDir reads the weights named name (ModelWeights when empty) in the
// Hugging Face directory dir, within the default budget per file; see
// ReadOptions.ReadSafetensorsDir.
func ReadSafetensorsDir(dir, name string) (*Dict, map[string]string, error) {
	return ReadOptions{}.ReadSafetensorsDir(dir, name)
}

// ReadSafetensorsDir reads the weights named name (ModelWeights when empty) in the
// Hugging Face directory dir: name.safetensors when it exists (transformers prefers it
// too), otherwise the shards that name.safetensors.index.json lists. It returns the
// tensors, shard by shard in file-name order and each shard's in file order, and the
// shards' __metadata__ (nil when none has any).
//
// The index is read as a stream within the budget o sets (each shard, too, within its
// own), and checked against the shards: every shard named must be a plain file name in
// dir (no path, no "..") that is a regular file or a symlink to one inside dir or, in the
// Hugging Face cache, into the repository's blobs (fsutil.InDir; the single file and the
// index too); every tensor the index lists must be in the shard it
// names, and a shard may hold no tensor the index does not list there; no tensor may
// be listed twice; shards whose metadata disagree on a key are refused. Errors name
// the file.
func (o ReadOptions) ReadSafetensorsDir(dir, name string) (*Dict, map[string]string, error) {
	return o.readSafetensorsDir(dir, name, o.ReadSafetensors)
}

// MapSafetensorsDir reads the weights named name in dir as ReadSafetensorsDir does,
// with every check, but leaves each file's tensor bytes where MapSafetensors does: in
// a read-only memory map of the file, so that loading a model never holds its files in
// Go's heap. The tensors' bytes are valid until the Mapping is closed.
func (o ReadOptions) MapSafetensorsDir(dir, name string) (*Dict, map[string]string, *Mapping, error) {
	m := &Mapping{}
	d, meta, err := o.readSafetensorsDir(dir, name, func(path string) (*Dict, map[string]string, error) {
		return o.mapSafetensors(path, m)
	})
	if err != nil {
		m.Close()
		return nil, nil, nil, err
	}
	return d, meta, m, nil
}

// readSafetensorsDir is ReadSafetensorsDir with read reading each file.
func (o ReadOptions) readSafetensorsDir(dir, name string, read func(path string) (*Dict, map[string]string, error)) (*Dict, map[string]string, error) {
	if name == "" {
		name = ModelWeights
	}
	if err := plainName(name); err != nil {
		return nil, nil, fmt.Errorf("checkpoint: weights name: %w", err)
	}
	single, err := fsutil.InDir(dir, name+".safetensors")
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := os.Stat(single); err == nil {
		return read(single)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	indexPath, err := fsutil.InDir(dir, name+".safetensors.index.json")
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	if _, err := os.Stat(indexPath); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("checkpoint: %s holds neither %s.safetensors nor %s.safetensors.index.json", dir, name, name)
	}
	index, err := o.readIndex(indexPath)
	if err != nil {
		return nil, nil, err
	}
	shards := map[string]int{} // shard file: how many tensors the index lists in it
	for _, f := range index.files {
		shards[f]++
	}
	files := make([]string, 0, len(shards))
	for f := range shards {
		if err := plainName(f); err != nil {
			return nil, nil, fmt.Errorf("checkpoint: %s: shard %s: %w", indexPath, cutName(f), err)
		}
		files = append(files, f)
	}
	slices.Sort(files)
	out := NewDict()
	var meta map[string]string
	metaFrom := map[string]string{} // metadata key: the shard it came from
	for _, f := range files {
		path, err := fsutil.InDir(dir, f)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: %s: shard %w", indexPath, err)
		}
		d, m, err := read(path)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range d.All() {
			tn := k.(string)
			listed, ok := index.shard[tn]
			if !ok {
				return nil, nil, fmt.Errorf("checkpoint: %s holds %s, which %s does not list", path, cutName(tn), indexPath)
			}
			if listed != f {
				return nil, nil, fmt.Errorf("checkpoint: %s holds %s, which %s lists in %s", path, cutName(tn), indexPath, cutName(listed))
			}
			out.Set(tn, v)
		}
		if d.Len() != shards[f] {
			for _, tn := range index.names {
				if index.shard[tn] != f {
					continue
				}
				if _, ok := d.Lookup(tn); !ok {
					return nil, nil, fmt.Errorf("checkpoint: %s lists %s in %s, which does not hold it", indexPath, cutName(tn), path)
				}
			}
		}
		for k, v := range m {
			if meta == nil {
				meta = map[string]string{}
			}
			if old, ok := meta[k]; ok && old != v {
				return nil, nil, fmt.Errorf("checkpoint: %s and %s disagree on metadata %s (%s, %s)",
					filepath.Join(dir, metaFrom[k]), path, cutName(k), cutName(old), cutName(v))
			}
			meta[k], metaFrom[k] = v, f
		}
	}
	return out, meta, nil
}

// shardIndex is a model.safetensors.index.json's weight_map.
type shardIndex struct {
	names []string          // tensors, in the index's order
	files []string          // their shards, interned
	shard map[string]string // tensor: shard
}

// readIndex reads a shard index: an object whose weight_map maps each tensor name to
// its shard file; metadata (total_size ...) and any other member are skipped. It is
// read as a stream under the same rules as a safetensors header: at most 100 MB, names
// of at most 64 KiB, at most ReadOptions.MaxHeaderEntries tensors.
func (o ReadOptions) readIndex(path string) (*shardIndex, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxSafetensorsHeader {
		return nil, fmt.Errorf("checkpoint: %s: %d bytes (an index may have at most %d)", path, size, maxSafetensorsHeader)
	}
	b := o.budget(size)
	if err := b.alloc(2 * scanBuffer); err != nil {
		return nil, err
	}
	idx, err := parseIndex(newJSONScanner(io.LimitReader(f, size)), b)
	if b.err != nil {
		return nil, fmt.Errorf("%w (reading %s)", b.err, path)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return idx, nil
}

func parseIndex(s *jsonScanner, b *budget) (*shardIndex, error) {
	idx := &shardIndex{shard: map[string]string{}}
	interned := map[string]string{}
	seen := map[string]bool{}
	empty, err := s.open('{', "a JSON object")
	if err != nil {
		return nil, err
	}
	for more := !empty; more; {
		key, err := readKey(s, seen)
		if err != nil {
			return nil, err
		}
		seen[key] = true
		if err := s.expect(':', "':'"); err != nil {
			return nil, err
		}
		if key != "weight_map" {
			if err := s.skipValue(0); err != nil {
				return nil, fmt.Errorf("%s: %w", cutName(key), err)
			}
		} else if err := idx.weightMap(s, b, interned); err != nil {
			return nil, err
		}
		if more, err = s.commaOr('}'); err != nil {
			return nil, err
		}
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	if !seen["weight_map"] {
		return nil, errors.New("no weight_map")
	}
	return idx, nil
}

func (idx *shardIndex) weightMap(s *jsonScanner, b *budget, interned map[string]string) error {
	empty, err := s.open('{', "an object")
	if err != nil {
		return fmt.Errorf("weight_map: %w", err)
	}
	for more := !empty; more; {
		name, err := readKey(s, idx.shard)
		if err != nil {
			return fmt.Errorf("weight_map: %w", err)
		}
		if int64(len(idx.names)) >= b.maxEntries {
			b.err = &LimitError{"header entries", b.maxEntries, "MaxHeaderEntries"}
			return b.err
		}
		if err := b.alloc(stEntryCost + 2*int64(len(name))); err != nil {
			return err
		}
		if err := s.expect(':', "':'"); err != nil {
			return fmt.Errorf("weight_map: %w", err)
		}
		fb, err := s.readString(maxSafetensorsName)
		if err != nil {
			return fmt.Errorf("weight_map %s: %w", cutName(name), err)
		}
		file, ok := interned[string(fb)]
		if !ok {
			file = string(fb)
			interned[file] = file
		}
		idx.names = append(idx.names, name)
		idx.files = append(idx.files, file)
		idx.shard[name] = file
		if more, err = s.commaOr('}'); err != nil {
			return fmt.Errorf("weight_map: %w", err)
		}
	}
	return nil
}

// plainName checks that a file name read from an index or given as a base name names a
// file in its directory: not empty, no path separator, not "." or "..".
func plainName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`+"\x00") || !filepath.IsLocal(name) {
		return fmt.Errorf("%s is not a file name in the directory", cutName(name))
	}
	return nil
}

// shardFileName is the name transformers gives shard k (from 1) of n.
func shardFileName(name string, k, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.safetensors", name, k, n)
}

// isShardFileName reports whether file is named as a shard of the weights name (by
// transformers' pattern: name-DDDDD-of-DDDDD.safetensors, at least five digits each).
func isShardFileName(file, name string) bool {
	rest, ok := strings.CutPrefix(file, name+"-")
	if !ok {
		return false
	}
	rest, ok = strings.CutSuffix(rest, ".safetensors")
	if !ok {
		return false
	}
	k, n, ok := strings.Cut(rest, "-of-")
	digits := func(s string) bool {
		return len(s) >= 5 && strings.Trim(s, "0123456789") == ""
	}
	return ok && digits(k) && digits(n)
}

// planShards splits the tensors of specs into shards as transformers' save_pretrained
// does (huggingface_hub's split_torch_state_dict_into_shards): in order, a shard is
// closed when the next tensor would take it past maxShardSize bytes, and a tensor
// larger than maxShardSize gets a shard of its own, placed before the shard being
// filled. Sizes are the bytes written. maxShardSize 0 means one shard. It returns the
// specs' indices shard by shard, the bytes and the elements of all tensors.
func planShards(specs []TensorSpec, maxShardSize int64) ([][]int, int64, int64) {
	var shards [][]int
	var current []int
	var currentSize, totalSize, totalParams int64
	for i, sp := range specs {
		size := sp.bytes()
		totalSize += size
		totalParams += (&Tensor{Shape: sp.Shape}).Numel()
		switch {
		case maxShardSize > 0 && size > maxShardSize:
			shards = append(shards, []int{i})
		default:
			if maxShardSize > 0 && currentSize+size > maxShardSize {
				shards = append(shards, current)
				current, currentSize = nil, 0
			}
			current = append(current, i)
			currentSize += size
		}
	}
	if len(current) > 0 || len(shards) == 0 {
		shards = append(shards, current)
	}
	return shards, totalSize, totalParams
}

// WriteSafetensorsDir saves tensors (a dict of names to *Tensor, as WriteSafetensors
// takes) in dir as transformers' save_pretrained saves a model's weights under the
// base name name (ModelWeights when empty; AdapterWeights for a PEFT adapter): as
// name.safetensors when they fit in maxShardSize bytes (or maxShardSize is 0), else as
// shards name-00001-of-0000N.safetensors split by transformers' rule (see planShards)
// with name.safetensors.index.json, whose metadata holds total_size (the bytes of all
// tensors) and total_parameters (their elements) and whose weight_map names each
// tensor's shard. Every file gets metadata, with "format": "pt" added when it has no
// "format" (transformers' loader refuses a file whose metadata lacks it).
// SafetensorsDirWriter writes the same files a tensor at a time.
//
// dir is created if needed. A file of dir that is a symlink is replaced by the new
// file, never written through (fsutil.StageInDir). Every file is written to a synced
// temporary file first, and only when all are written are they renamed into place,
// so a failed save (a tensor that cannot be written, a full disk, a directory where a
// file goes) leaves no file of its own and the previous save as it was. Then the files of an earlier save of name that the new one
// does not use are removed: shards by transformers' naming (as save_pretrained removes
// them), the single file when the new save is sharded (it would be read instead of the
// shards), and the index when it is not. A crash while the files are being renamed can
// leave a mix of the two saves.
func WriteSafetensorsDir(dir, name string, tensors *Dict, metadata map[string]string, maxShardSize int64) error {
	specs := make([]TensorSpec, 0, tensors.Len())
	list := make([]*Tensor, 0, tensors.Len())
	for k, v := range tensors.All() {
		name, t, err := stTensorOf(k, v)
		if err != nil {
			return err
		}
		specs = append(specs, TensorSpec{Name: name, DType: t.DType, Shape: t.Shape})
		list = append(list, t)
	}
	w, err := NewSafetensorsDirWriter(dir, name, specs, metadata, maxShardSize)
	if err != nil {
		return err
	}
	for i, t := range list {
		if err := w.Write(specs[i].Name, t); err != nil {
			return err
		}
	}
	return w.Close()
}

// removeIfFile removes path if it is a file or a symlink (never a directory); a
// missing file is no error.
func removeIfFile(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if fi.IsDir() {
		return fmt.Errorf("checkpoint: %s is a directory, where a stale weights file was to be removed", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
