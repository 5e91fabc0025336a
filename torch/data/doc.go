// Package data feeds training: datasets, transforms, samplers and a DataLoader that reads,
// transforms and collates in goroutines.
//
// A sample and a batch are sets of named fields (Sample, Batch), each a tensor of any
// dtype torch knows: an image as uint8 or float32 ("input"), a class index ("label"), a
// regression target ("target"), token ids ("input_ids", "labels"), masks, several inputs
// at once. The names Input, Label and Target are what the trainer's default
// classification step reads; a user's step reads whatever its data yields. The loader
// stacks each field along a new first dimension; fields declared in LoaderOptions.Pad may
// differ in length and are padded, with a bool "<name>_mask" field marking real entries;
// LoaderOptions.Collate replaces the whole collation.
//
// Datasets and transforms work on Go memory: worker goroutines never call into libtorch,
// so libtorch's thread-local state (grad mode, autocast, the current CUDA stream) and
// tensor scopes stay with the goroutine that consumes batches. Workers decode samples
// straight into reused host buffers; the consumer's Next turns a buffer into tensors (in
// pinned memory with a non-blocking copy when the target device is CUDA) and hands the
// buffer back. The tensors belong to whatever scope the caller has open.
//
// The order of an epoch is a pure function of (seed, epoch): the permutation is PyTorch's
// torch.randperm(n, generator=torch.Generator().manual_seed(seed+epoch)), exactly as
// torch.utils.data.DistributedSampler draws it after set_epoch(epoch). A shuffled loader
// in a single process is a DistributedSampler with world size 1, so a resumed run sees the
// same order, and an iterator can start at batch k without reading batches 0..k-1.
// Random augmentations draw from a generator seeded by (seed, epoch, sample index), so
// they do not depend on the number of workers or on timing.
//
// Datasets users have: ImageFolder (torchvision's layout and order, PNG/JPEG/... decoded
// in the workers, converted as PIL does), with torchvision's transforms (Resize,
// CenterCrop, RandomResizedCrop, RandomHorizontalFlip, RandomCrop, Normalize,
// ConvertImageDtype/ToTensor; NormalizeImages on the device); CSV files with named
// columns (ReadCSV); nanoGPT's token files and plain text (OpenTokens, OpenText); Go
// slices (TensorDataset); MNIST and Fashion-MNIST IDX files — FashionMNIST("", train)
// reads them where Debian's dataset-fashion-mnist package installs them. Synthetic is a
// small learnable dataset for tests and for machines without the data. RandomSplit
// splits one of them as torch.utils.data.random_split does.
//
// Every input is read within a budget, and a bad one is an error naming the file (and
// line and column, or field), never a panic, a hang or an allocation Go cannot recover
// from: data files must be regular files (OpenRegular: a FIFO or /dev/zero fails at
// once); an image's size is read from its header and checked against PIL's
// MAX_IMAGE_PIXELS (DefaultMaxImagePixels; warn above it, refuse above twice it) before
// any pixel buffer exists; a gzip IDX file may declare at most MaxIDXInflation times its
// size; CSV labels are bounded by CSVOptions.MaxClasses; dataset lengths by MaxSamples.
package data
