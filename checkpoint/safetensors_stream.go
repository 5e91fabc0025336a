package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// TensorSpec is what a safetensors file's header says of a tensor: its name, dtype and
// shape. A streamed write (SafetensorsDirWriter) takes every tensor's spec first, to
// split the shards and write each file's header before its data.
type TensorSpec struct {
	Name  string
	DType DType
	Shape []int64
}

// bytes is the size of the tensor's data.
func (s TensorSpec) bytes() int64 {
	return (&Tensor{Shape: s.Shape}).Numel() * int64(s.DType.ElemSize())
}

// SafetensorsDirWriter writes the weights of a Hugging Face directory one tensor at a
// time, as WriteSafetensorsDir writes them all at once (it is this writer's loop): the
// same files, byte for byte, and the same atomicity (each file staged, all renamed into
// place by Close). Only the tensor being written need be in memory: each Write streams
// its tensor's bytes into its staged shard file and returns once they are written, so
// that the caller may free the tensor (a model gathered one unit at a time, for
// instance).
//
// Write the tensors in the order of the specs given to NewSafetensorsDirWriter, then
// Close; Abort (or any error) removes the files staged so far and leaves the directory
// as it was. A writer is not safe for concurrent use.
type SafetensorsDirWriter struct {
	dir, name              string
	specs                  []TensorSpec
	meta                   map[string]string
	plan                   [][]int // the specs' indices, shard by shard
	shardOf                []int   // by spec index
	totalSize, totalParams int64
	next                   int // the next spec to write

	open   map[int]*shardStream // the shard files being written
	staged []*fsutil.Staged     // by shard, once written
	err    error                // the first error: the writer is aborted
	closed bool
}

// shardStream is one shard file being staged: StageInDir's write function runs in a
// goroutine and takes the shard's tensors from in, one at a time, acknowledging each.
type shardStream struct {
	file string
	left int // tensors not yet sent
	in   chan *Tensor
	ack  chan struct{}
	done chan stageResult // the staged file, once the write function returned
}

type stageResult struct {
	st  *fsutil.Staged
	err error
}

// errWriteAborted ends a shard file's write function when the writer is aborted.
var errWriteAborted = errors.New("checkpoint: safetensors: write aborted")

// NewSafetensorsDirWriter starts writing, in dir, the weights named name (ModelWeights
// when empty) whose tensors specs describe, in the order they will be written, with
// metadata in every file ("format": "pt" added when missing), sharded at maxShardSize
// bytes (0: one file) by WriteSafetensorsDir's rule. dir is created if needed.
func NewSafetensorsDirWriter(dir, name string, specs []TensorSpec, metadata map[string]string, maxShardSize int64) (*SafetensorsDirWriter, error) {
	if name == "" {
		name = ModelWeights
	}
	if err := plainName(name); err != nil {
		return nil, fmt.Errorf("checkpoint: weights name: %w", err)
	}
	if maxShardSize < 0 {
		return nil, fmt.Errorf("checkpoint: maximum shard size %d is negative", maxShardSize)
	}
	seen := make(map[string]bool, len(specs))
	for _, s := range specs {
		if err := s.check(); err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("checkpoint: safetensors: tensor %s is named twice", cutName(s.Name))
		}
		seen[s.Name] = true
	}
	plan, totalSize, totalParams := planShards(specs, maxShardSize)
	shardOf := make([]int, len(specs))
	for k, idx := range plan {
		for _, i := range idx {
			shardOf[i] = k
		}
	}
	meta := map[string]string{"format": "pt"}
	for k, v := range metadata {
		meta[k] = v
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return &SafetensorsDirWriter{dir: dir, name: name, specs: slices.Clone(specs), meta: meta, plan: plan, shardOf: shardOf,
		totalSize: totalSize, totalParams: totalParams, open: map[int]*shardStream{}, staged: make([]*fsutil.Staged, len(plan))}, nil
}

// check refuses a spec that the format cannot hold or readers refuse.
func (s TensorSpec) check() error {
	if err := stCheckName(s.Name); err != nil {
		return err
	}
	for _, d := range s.Shape {
		if d < 0 {
			return fmt.Errorf("checkpoint: safetensors: %s: negative dimension in shape %v", cutName(s.Name), s.Shape)
		}
	}
	if dtypes[s.DType].st == "" {
		return fmt.Errorf("checkpoint: safetensors: %s: the format has no %v dtype", cutName(s.Name), s.DType)
	}
	return nil
}

// sharded reports whether the weights are split into several files.
func (w *SafetensorsDirWriter) sharded() bool { return len(w.plan) > 1 }

// fileName is the file of shard k.
func (w *SafetensorsDirWriter) fileName(k int) string {
	if w.sharded() {
		return shardFileName(w.name, k+1, len(w.plan))
	}
	return w.name + ".safetensors"
}

// Write writes the next tensor, which must be named and shaped as its spec; it returns
// once the tensor's bytes are in the staged file. An error aborts the writer.
func (w *SafetensorsDirWriter) Write(name string, t *Tensor) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("checkpoint: safetensors: Write after Close")
	}
	if err := w.write(name, t); err != nil {
		w.fail(err)
		return err
	}
	return nil
}

func (w *SafetensorsDirWriter) write(name string, t *Tensor) error {
	if w.next >= len(w.specs) {
		return fmt.Errorf("checkpoint: safetensors: tensor %s is one more than the %d announced", cutName(name), len(w.specs))
	}
	sp := w.specs[w.next]
	if name != sp.Name {
		return fmt.Errorf("checkpoint: safetensors: tensor %s written where %s was announced", cutName(name), cutName(sp.Name))
	}
	_, tt, err := stTensorOf(name, t)
	if err != nil {
		return err
	}
	if tt.DType != sp.DType || !slices.Equal(tt.Shape, sp.Shape) {
		return fmt.Errorf("checkpoint: safetensors: tensor %s is %v %v, announced as %v %v", cutName(name), tt.DType, tt.Shape, sp.DType, sp.Shape)
	}
	k := w.shardOf[w.next]
	s := w.open[k]
	if s == nil {
		s = w.startShard(k)
		w.open[k] = s
	}
	failed := func(r stageResult) error {
		delete(w.open, k)
		if r.st != nil {
			r.st.Abort()
		}
		if r.err == nil {
			r.err = errors.New("checkpoint: safetensors: the file ended early")
		}
		return fmt.Errorf("%w (writing %s)", r.err, filepath.Join(w.dir, s.file))
	}
	select {
	case s.in <- tt:
	case r := <-s.done:
		return failed(r)
	}
	select {
	case <-s.ack:
	case r := <-s.done:
		return failed(r)
	}
	w.next++
	if s.left--; s.left == 0 {
		// The write function returns after the shard's last tensor: the file is staged.
		r := <-s.done
		if r.err != nil {
			return failed(r)
		}
		delete(w.open, k)
		w.staged[k] = r.st
	}
	return nil
}

// startShard starts staging shard k's file: its header now, its tensors as they come.
func (w *SafetensorsDirWriter) startShard(k int) *shardStream {
	idx := w.plan[k]
	specs := make([]TensorSpec, len(idx))
	for i, j := range idx {
		specs[i] = w.specs[j]
	}
	s := &shardStream{file: w.fileName(k), left: len(idx), in: make(chan *Tensor), ack: make(chan struct{}), done: make(chan stageResult, 1)}
	go func() {
		st, err := fsutil.StageInDir(w.dir, s.file, func(out io.Writer) error {
			if err := writeSafetensorsHeader(out, specs, w.meta); err != nil {
				return err
			}
			for range specs {
				t, ok := <-s.in
				if !ok {
					return errWriteAborted
				}
				if err := writeSafetensorsData(out, t); err != nil {
					return err
				}
				s.ack <- struct{}{}
			}
			return nil
		})
		s.done <- stageResult{st, err}
	}()
	return s
}

// fail records err and removes what was staged.
func (w *SafetensorsDirWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
	w.abort()
}

// Abort stops the write and removes the files staged so far: the directory is left as
// it was. After an error or Close it does nothing.
func (w *SafetensorsDirWriter) Abort() {
	if w.err == nil && !w.closed {
		w.err = errWriteAborted
		w.abort()
	}
}

func (w *SafetensorsDirWriter) abort() {
	for k, s := range w.open {
		delete(w.open, k)
		close(s.in)
		if r := <-s.done; r.st != nil {
			r.st.Abort()
		}
	}
	for k, st := range w.staged {
		if st != nil {
			st.Abort()
			w.staged[k] = nil
		}
	}
}

// Close writes the index of a sharded save and renames every staged file into place,
// then removes the files of an earlier save that this one does not use, as
// WriteSafetensorsDir does. Every announced tensor must have been written.
func (w *SafetensorsDirWriter) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("checkpoint: safetensors: Close called twice")
	}
	if w.next < len(w.specs) {
		err := fmt.Errorf("checkpoint: safetensors: closed after %d of the %d tensors announced (%s is next)", w.next, len(w.specs), cutName(w.specs[w.next].Name))
		w.fail(err)
		return err
	}
	for k, idx := range w.plan {
		if len(idx) > 0 {
			continue
		}
		// A save of no tensor: its one file, with a header only, is staged here.
		st, err := fsutil.StageInDir(w.dir, w.fileName(k), func(out io.Writer) error {
			return writeSafetensorsHeader(out, nil, w.meta)
		})
		if err != nil {
			err = fmt.Errorf("%w (writing %s)", err, filepath.Join(w.dir, w.fileName(k)))
			w.fail(err)
			return err
		}
		w.staged[k] = st
	}
	if err := w.commit(); err != nil {
		w.fail(err)
		return err
	}
	w.closed = true
	return nil
}

// commit stages the index (a sharded save) and renames the files into place: the
// shards, then the index last, once the single file that would shadow it is gone.
func (w *SafetensorsDirWriter) commit() error {
	keep := map[string]bool{}
	weightMap := map[string]string{}
	for k, idx := range w.plan {
		file := w.fileName(k)
		keep[file] = true
		for _, i := range idx {
			weightMap[w.specs[i].Name] = file
		}
	}
	indexFile := w.name + ".safetensors.index.json"
	var index *fsutil.Staged
	if w.sharded() {
		content := struct {
			Metadata  map[string]int64  `json:"metadata"`
			WeightMap map[string]string `json:"weight_map"`
		}{map[string]int64{"total_size": w.totalSize, "total_parameters": w.totalParams}, weightMap}
		st, err := fsutil.StageInDir(w.dir, indexFile, func(out io.Writer) error {
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			return enc.Encode(content) // maps are written in sorted key order, as transformers does
		})
		if err != nil {
			return err
		}
		index = st
	}
	for k, st := range w.staged {
		w.staged[k] = nil
		if err := st.Commit(); err != nil {
			if index != nil {
				index.Abort()
			}
			return err
		}
	}
	if index != nil {
		if err := removeIfFile(filepath.Join(w.dir, w.name+".safetensors")); err != nil {
			index.Abort()
			return err
		}
		if err := index.Commit(); err != nil {
			return err
		}
	} else if err := removeIfFile(filepath.Join(w.dir, indexFile)); err != nil {
		return err
	}
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range entries {
		if f := e.Name(); isShardFileName(f, w.name) && !keep[f] {
			if err := removeIfFile(filepath.Join(w.dir, f)); err != nil {
				return err
			}
		}
	}
	fsutil.SyncDir(w.dir)
	return nil
}
