package data

import "github.com/gotrain/gotrain/torch"

// LoaderOptions configures a Loader. The zero value of a field means its default.
type LoaderOptions struct {
	// BatchSize is the number of samples per batch (default 1).
	BatchSize int
	// Shuffle draws each epoch's order from (Seed, epoch): it is the order of PyTorch's
	// DistributedSampler(ds, num_replicas=WorldSize, rank=Rank, seed=Seed) after
	// set_epoch(epoch), which with WorldSize 1 is a plain seeded shuffle (not the order of
	// PyTorch's RandomSampler, which draws from the global generator). Without Shuffle
	// the order is the dataset's.
	Shuffle bool
	// DropLast drops the last batch of an epoch when it is smaller than BatchSize, like
	// DataLoader's drop_last. The sampler itself pads ranks to equal length
	// (DistributedSampler's drop_last=False); pass a Sampler to cut instead.
	DropLast bool
	// Workers is the number of goroutines that read, transform and collate (default 1).
	// The order of batches and their contents do not depend on it.
	Workers int
	// Inline fills each batch on the goroutine that calls Next, with no worker goroutines
	// (PyTorch's num_workers=0). For in-memory data without costly transforms it is the
	// fastest choice: it saves the handoff between threads. Workers and Prefetch are
	// then unused.
	Inline bool
	// Resident keeps the whole dataset in libtorch memory on Device, read once through
	// ReadBatch when the first epoch starts: each batch is then a view of it (an
	// unshuffled epoch) or one index_select per field, made on the consumer's goroutine,
	// with no worker and no host copy per batch. It is the fastest choice for a dataset
	// that fits in (device) memory, which it takes once more; Free gives it back. The
	// dataset must be a BatchReader (a TensorDataset) and Transform, Collate and Pad
	// unset. The batch tensors are views: a step must not change them in place.
	Resident bool
	// Prefetch bounds the batches being read or waiting to be used (default 2*Workers),
	// and so the host memory the loader holds.
	Prefetch int
	// Seed seeds the shuffle and the random transforms.
	Seed int64
	// Rank and WorldSize split each epoch among processes as DistributedSampler does
	// (WorldSize 0 means 1).
	Rank, WorldSize int
	// Sampler, when set, orders the epochs instead of the sampler that Shuffle, Seed,
	// Rank and WorldSize describe.
	Sampler Sampler
	// Device is where Next puts the batch tensors (the zero value is the CPU). On a CUDA
	// device they go through pinned host memory with a non-blocking copy.
	Device torch.Device
	// Transform is applied to every sample in the workers, with randomness drawn from
	// (Seed, epoch, sample index).
	Transform Transform
	// Pad names the variable-length fields and their pad values: such a field is padded
	// along its first dimension to the longest in the batch, and the batch gains a bool
	// field MaskName(name) of shape [batch, longest], true at real entries. Other fields
	// must have one shape throughout a batch.
	Pad map[string]float64
	// Collate, when set, replaces DefaultCollate (and Pad): it builds each batch from the
	// transformed samples, in the workers, like DataLoader's collate_fn.
	Collate CollateFunc
	// OnDevice, when set, is applied to every batch by Next once its tensors are on
	// Device, on the consumer's goroutine and in its scope: the place for work that is
	// cheaper on the device than in the workers, such as turning uint8 images into
	// normalized floats (NormalizeImages).
	OnDevice func(b *Batch)
}
