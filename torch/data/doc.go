// Package data feeds training: datasets, transforms, samplers and a DataLoader that reads,
// transforms and collates in goroutines.
//
// Datasets and transforms work on Go memory: a Sample is Go slices, and worker goroutines
// never call into libtorch, so libtorch's thread-local state (grad mode, autocast, the
// current CUDA stream) and tensor scopes stay with the goroutine that consumes batches.
// Workers collate into reused host buffers; the consumer's Next turns a buffer into
// tensors (in pinned memory with a non-blocking copy when the target device is CUDA) and
// hands the buffer back. The tensors belong to whatever scope the caller has open.
//
// The order of an epoch is a pure function of (seed, epoch): the permutation is PyTorch's
// torch.randperm(n, generator=torch.Generator().manual_seed(seed+epoch)), exactly as
// torch.utils.data.DistributedSampler draws it after set_epoch(epoch). A shuffled loader
// in a single process is a DistributedSampler with world size 1, so a resumed run sees the
// same order, and an iterator can start at batch k without reading batches 0..k-1.
// Random augmentations draw from a generator seeded by (seed, epoch, sample index), so
// they do not depend on the number of workers or on timing.
//
// MNIST and Fashion-MNIST are read from IDX files (gzip or raw); FashionMNIST("", train)
// reads them where Debian's dataset-fashion-mnist package installs them. Synthetic is a
// small learnable dataset for tests and for machines without the data.
package data
