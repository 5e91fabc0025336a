package data

import (
	"fmt"
	"math/rand/v2"
)

// SyntheticDataset is a deterministic, learnable classification dataset generated on
// the fly: each class has a random prototype, and sample i is its class's prototype plus
// Gaussian noise, both drawn from generators seeded by Seed (and i), so it needs no memory
// per sample and no files.
type SyntheticDataset struct {
	N, Classes int
	Shape      []int64
	Seed       int64
	// Noise is the standard deviation of the noise around a prototype (prototype values
	// have standard deviation 1).
	Noise      float32
	prototypes [][]float32
}

// Synthetic returns n samples of the given shape in classes classes, with noise of
// standard deviation 1 around prototypes that are a linear classifier's easy prey.
func Synthetic(n, classes int, shape []int64, seed int64) (*SyntheticDataset, error) {
	if n < 0 || classes < 1 || numel(shape) < 1 {
		return nil, fmt.Errorf("data: Synthetic: need n >= 0, classes >= 1 and a non-empty shape; got %d, %d, %v", n, classes, shape)
	}
	if err := checkSamples("Synthetic", n); err != nil {
		return nil, err
	}
	// The prototypes are held: classes x numel floats.
	if per := satMul(int64(classes), numel64(shape)); per > physicalMemory()/16 {
		return nil, fmt.Errorf("data: Synthetic: %d classes of shape %v need %d prototype values, more than this machine holds", classes, shape, per)
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0))
	protos := make([][]float32, classes)
	for c := range protos {
		p := make([]float32, numel(shape))
		for j := range p {
			p[j] = float32(r.NormFloat64())
		}
		protos[c] = p
	}
	return &SyntheticDataset{N: n, Classes: classes, Shape: shape, Seed: seed, Noise: 1, prototypes: protos}, nil
}

// Len returns N.
func (d *SyntheticDataset) Len() int { return d.N }

// Get writes sample i into s: fields Input (float32 of shape Shape) and Label, which
// is i mod Classes.
func (d *SyntheticDataset) Get(i int, s *Sample) error {
	if i < 0 || i >= d.N {
		return fmt.Errorf("data: Synthetic: index %d out of range [0, %d)", i, d.N)
	}
	label := i % d.Classes
	r := rand.New(rand.NewPCG(uint64(d.Seed), uint64(i)+1))
	in := SetValues[float32](s, Input, d.Shape...)
	for k, p := range d.prototypes[label] {
		in[k] = p + d.Noise*float32(r.NormFloat64())
	}
	SetScalar(s, Label, int64(label))
	return nil
}
