package data

import "fmt"

// Sampler gives the dataset indices one process reads in an epoch, in order. Indices is
// a pure function of the epoch, so a resumed run can rebuild any epoch's order.
type Sampler interface {
	// Len is the number of indices per epoch.
	Len() int
	// EpochIndices returns the indices of epoch.
	EpochIndices(epoch int) []int
}

// DistributedSampler splits a dataset of N samples among WorldSize processes, as
// torch.utils.data.DistributedSampler does: with Shuffle, epoch e's order is
// torch.randperm(N, generator=torch.Generator().manual_seed(Seed+e)); without DropLast
// the order is padded by repeating its head until it divides evenly, with DropLast its
// tail is cut; rank r then takes every WorldSize-th index starting at r. Every rank gets
// Len() indices, and the ranks together cover each sample once per epoch (plus the
// padding).
//
// A single-process loader uses it with WorldSize 1, where it is a plain seeded shuffle.
type DistributedSampler struct {
	N               int
	Rank, WorldSize int
	Shuffle         bool
	Seed            int64
	DropLast        bool

	epoch int
}

// NewDistributedSampler returns a sampler of n samples for rank of worldSize, checking
// the arguments as PyTorch does.
func NewDistributedSampler(n, rank, worldSize int, shuffle bool, seed int64, dropLast bool) (*DistributedSampler, error) {
	if worldSize < 1 || rank < 0 || rank >= worldSize {
		return nil, fmt.Errorf("data: DistributedSampler: invalid rank %d for world size %d; rank should be in [0, %d]", rank, worldSize, worldSize-1)
	}
	if n < 0 {
		return nil, fmt.Errorf("data: DistributedSampler: negative dataset length %d", n)
	}
	if err := checkSamples("DistributedSampler", n); err != nil {
		return nil, err
	}
	return &DistributedSampler{N: n, Rank: rank, WorldSize: worldSize, Shuffle: shuffle, Seed: seed, DropLast: dropLast}, nil
}

// Len is PyTorch's num_samples: ceil(N / WorldSize), or with DropLast
// ceil((N - WorldSize) / WorldSize) when N does not divide evenly.
func (s *DistributedSampler) Len() int {
	if s.DropLast && s.N%s.WorldSize != 0 {
		return ceilDiv(s.N-s.WorldSize, s.WorldSize)
	}
	return ceilDiv(s.N, s.WorldSize)
}

// SetEpoch sets the epoch that Indices returns, like PyTorch's set_epoch.
func (s *DistributedSampler) SetEpoch(epoch int) { s.epoch = epoch }

// Indices returns the indices of the epoch last given to SetEpoch (0 before any call),
// like list(sampler) in PyTorch.
func (s *DistributedSampler) Indices() []int { return s.EpochIndices(s.epoch) }

// EpochIndices returns this rank's indices for epoch.
func (s *DistributedSampler) EpochIndices(epoch int) []int {
	var order []int
	if s.Shuffle {
		order = Randperm(s.N, s.Seed+int64(epoch))
	} else {
		order = arange(s.N)
	}
	total := s.Len() * s.WorldSize
	if pad := total - len(order); pad > 0 && len(order) > 0 {
		// PyTorch repeats the whole order as often as needed, then takes the head.
		for head := order; len(order) < total; {
			order = append(order, head[:min(len(head), total-len(order))]...)
		}
	}
	order = order[:total]
	out := make([]int, 0, s.Len())
	for i := s.Rank; i < total; i += s.WorldSize {
		out = append(out, order[i])
	}
	return out
}

func ceilDiv(a, b int) int {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1 // not (a+b-1)/b, which overflows for a batch size near MaxInt
}
