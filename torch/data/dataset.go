package data

import (
	"fmt"
	"slices"

	"github.com/gotrain/gotrain/torch"
)

// Dataset is a random-access collection of samples, like torch.utils.data.Dataset.
// Get is called from several goroutines at once and must be safe for that, and must not
// call libtorch. Transforms change samples in place, so Get copies into s rather than
// handing out the dataset's own storage.
type Dataset interface {
	// Len is the number of samples.
	Len() int
	// Get writes the fields of sample i (0 <= i < Len()) into s, which the caller has
	// Reset: s.Set (or SetValues, SetScalar) reuses storage, so that the loader can
	// have samples decoded straight into its batch buffers.
	Get(i int, s *Sample) error
}

// TensorDataset is a dataset held in Go slices: sample i is field Input, the i-th block
// of prod(SampleShape) values of Inputs, with field Label = Labels[i] or, when Targets is
// set, field Target, the i-th block of prod(TargetShape) values of Targets. It is
// torch.utils.data.TensorDataset for a (features, labels) or (features, targets) pair.
type TensorDataset struct {
	Inputs      []float32
	SampleShape []int64
	Labels      []int64
	Targets     []float32
	TargetShape []int64
}

// NewTensorDataset checks that inputs, labels and targets agree in length and returns
// the dataset. Pass nil labels for a regression dataset (targets set), or nil targets
// for classification.
func NewTensorDataset(inputs []float32, sampleShape []int64, labels []int64, targets []float32, targetShape []int64) (*TensorDataset, error) {
	per := numel(sampleShape)
	if per <= 0 || len(inputs)%per != 0 {
		return nil, fmt.Errorf("data: TensorDataset: %d input values do not divide into samples of shape %v", len(inputs), sampleShape)
	}
	n := len(inputs) / per
	if targets == nil && len(labels) != n {
		return nil, fmt.Errorf("data: TensorDataset: %d samples but %d labels", n, len(labels))
	}
	if targets != nil {
		if labels != nil {
			return nil, fmt.Errorf("data: TensorDataset: both labels and targets given; a sample has one or the other")
		}
		if tper := numel(targetShape); tper <= 0 || len(targets) != n*tper {
			return nil, fmt.Errorf("data: TensorDataset: %d samples need %d target values of shape %v, got %d", n, n*numel(targetShape), targetShape, len(targets))
		}
	}
	return &TensorDataset{Inputs: inputs, SampleShape: sampleShape, Labels: labels, Targets: targets, TargetShape: targetShape}, nil
}

// Len returns the number of samples.
func (d *TensorDataset) Len() int { return len(d.Inputs) / numel(d.SampleShape) }

// Get writes sample i into s.
func (d *TensorDataset) Get(i int, s *Sample) error {
	if i < 0 || i >= d.Len() {
		return fmt.Errorf("data: TensorDataset: index %d out of range [0, %d)", i, d.Len())
	}
	per := numel(d.SampleShape)
	copy(SetValues[float32](s, Input, d.SampleShape...), d.Inputs[i*per:(i+1)*per])
	if d.Targets != nil {
		tper := numel(d.TargetShape)
		copy(SetValues[float32](s, Target, d.TargetShape...), d.Targets[i*tper:(i+1)*tper])
		return nil
	}
	SetScalar(s, Label, d.Labels[i])
	return nil
}

// BatchReader is a Dataset that reads a whole batch at once, such as an in-memory array:
// a loader with no Transform, Collate or Pad calls ReadBatch once per batch instead of
// Get once per sample. It is called from several goroutines at once, like Get.
type BatchReader interface {
	Dataset
	// ReadBatch writes the collated fields of the samples at indices into s (Reset by
	// the caller), each of shape [len(indices), sample shape...]: what the default
	// collation of Get's samples would give.
	ReadBatch(indices []int, s *Sample) error
}

// ReadBatch writes the samples at indices into s as one batch. Consecutive indices (an
// unshuffled epoch) are a view of the dataset's slices, copied once, into the batch
// tensor; other orders are gathered row by row.
func (d *TensorDataset) ReadBatch(indices []int, s *Sample) error {
	n := d.Len()
	for _, i := range indices {
		if i < 0 || i >= n {
			return fmt.Errorf("data: TensorDataset: index %d out of range [0, %d)", i, n)
		}
	}
	rows(s, Input, d.Inputs, d.SampleShape, indices)
	if d.Targets != nil {
		rows(s, Target, d.Targets, d.TargetShape, indices)
	} else {
		rows(s, Label, d.Labels, nil, indices)
	}
	return nil
}

// rows sets field name of s to the rows of src (each of shape) at indices.
func rows[T torch.Elem](s *Sample, name string, src []T, shape []int64, indices []int) {
	per := numel(shape)
	bshape := append([]int64{int64(len(indices))}, shape...)
	if len(indices) > 0 && consecutive(indices) {
		first := indices[0] * per
		s.borrow(name, torch.DTypeOf[T](), bshape, bytesOf(src[first:first+len(indices)*per]))
		return
	}
	dst := SetValues[T](s, name, bshape...)
	for j, i := range indices {
		copy(dst[j*per:(j+1)*per], src[i*per:(i+1)*per])
	}
}

func consecutive(indices []int) bool {
	for j := 1; j < len(indices); j++ {
		if indices[j] != indices[j-1]+1 {
			return false
		}
	}
	return true
}

// Subset is the samples of Dataset at Indices, like torch.utils.data.Subset.
type Subset struct {
	Dataset Dataset
	Indices []int
}

// Len returns len(Indices).
func (s *Subset) Len() int { return len(s.Indices) }

// Get writes sample Indices[i] of the underlying dataset into dst.
func (s *Subset) Get(i int, dst *Sample) error {
	if i < 0 || i >= len(s.Indices) {
		return fmt.Errorf("data: Subset: index %d out of range [0, %d)", i, len(s.Indices))
	}
	return s.Dataset.Get(s.Indices[i], dst)
}

// Head returns the first n samples of ds (all of them when it has fewer), for smoke
// runs on a slice of a data set.
func Head(ds Dataset, n int) *Subset {
	return &Subset{Dataset: ds, Indices: arange(min(n, ds.Len()))}
}

// RandomSplit splits ds into non-overlapping subsets of the given lengths, which must sum
// to ds.Len(). The split is that of PyTorch's
// random_split(ds, lengths, generator=torch.Generator().manual_seed(seed)).
func RandomSplit(ds Dataset, lengths []int, seed int64) ([]*Subset, error) {
	total := 0
	for _, l := range lengths {
		if l < 0 {
			return nil, fmt.Errorf("data: RandomSplit: negative length in %v", lengths)
		}
		total = int(satAdd(int64(total), int64(l)))
	}
	if total != ds.Len() {
		return nil, fmt.Errorf("data: RandomSplit: lengths %v sum to %d, dataset has %d samples", lengths, total, ds.Len())
	}
	if err := checkSamples("RandomSplit", total); err != nil {
		return nil, err
	}
	perm := Randperm(total, seed)
	subsets := make([]*Subset, len(lengths))
	off := 0
	for k, l := range lengths {
		subsets[k] = &Subset{Dataset: ds, Indices: slices.Clip(perm[off : off+l])}
		off += l
	}
	return subsets, nil
}

// arange returns 0, 1, ..., n-1.
func arange(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// convert returns the values of x converted to To.
func convert[To, From int | int64 | float32 | float64 | byte](x []From) []To {
	out := make([]To, len(x))
	for i, v := range x {
		out[i] = To(v)
	}
	return out
}

func numel(shape []int64) int { return int(numel64(shape)) }

// numel64 is the element count of shape, saturated at math.MaxInt64; -1 when a dimension
// is negative.
func numel64(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		n = satMul(n, d)
	}
	return n
}
