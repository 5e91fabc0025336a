package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotrain/gotrain/torch/data"
)

// dataSpec is what a run trains on, and what the model must look like to take it.
type dataSpec struct {
	kind       string // "fashion-mnist", "imagefolder", "csv", "text", "tokens", "synthetic"
	train, val data.Dataset
	shape      []int64        // one sample's input
	classes    int            // for token files: the vocabulary size
	names      []string       // class names by index
	transform  data.Transform // per sample, in the loader's workers
	// mean and std normalize the images on the device (data.NormalizeImages).
	mean, std []float32
}

// loadData reads --data: an ImageFolder tree (train/ and val/ subfolders, or one tree
// with --val-split), a CSV file (--label-column), a token file (nanoGPT's train.bin,
// with val.bin beside it or --val-split), a text file (byte-level windows of --block-size for a language
// model), or the Fashion-MNIST directory (the default), or --synthetic data.
func loadData(c Config) (*dataSpec, error) {
	if err := checkDataSizes(c); err != nil {
		return nil, err
	}
	if c.Synthetic > 0 {
		// One distribution, split, so the validation set is learnable from the training set.
		all, err := data.Synthetic(c.Synthetic+max(c.Synthetic/5, 1), 10, []int64{1, 28, 28}, c.Seed)
		if err != nil {
			return nil, err
		}
		parts, err := data.RandomSplit(all, []int{c.Synthetic, all.Len() - c.Synthetic}, c.Seed)
		if err != nil {
			return nil, err
		}
		return &dataSpec{kind: "synthetic", train: parts[0], val: parts[1], shape: []int64{1, 28, 28}, classes: 10}, nil
	}
	var spec *dataSpec
	var err error
	// Stat does not open: a FIFO given as --data is refused here instead of blocking.
	switch fi, statErr := os.Stat(c.DataDir); {
	case c.DataDir != "" && statErr != nil:
		return nil, fmt.Errorf("--data: %w", statErr)
	case c.DataDir != "" && !fi.IsDir() && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("--data: %w; it must be a file (CSV, token file, text) or a directory (an ImageFolder tree, Fashion-MNIST)",
			&data.NotRegularError{Path: c.DataDir, Mode: fi.Mode()})
	case c.DataDir != "" && !fi.IsDir() && strings.EqualFold(filepath.Ext(c.DataDir), ".csv"):
		spec, err = csvTable(c)
	case c.DataDir != "" && !fi.IsDir() && strings.EqualFold(filepath.Ext(c.DataDir), ".bin"):
		spec, err = tokenFile(c)
	case c.DataDir != "" && !fi.IsDir():
		if fi.Size() > maxTextBytes {
			return nil, fmt.Errorf("--data %s: a text file of %d bytes is read into memory, and more than %d is not; tokenize it into a token file (nanoGPT's train.bin, memory-mapped)",
				c.DataDir, fi.Size(), int64(maxTextBytes))
		}
		spec = &dataSpec{kind: "text", shape: []int64{int64(blockSize(c))}}
		spec.train, spec.val, err = readByteText(c.DataDir, blockSize(c), c.ValSplit)
	case c.DataDir != "" && (hasSubdirs(c.DataDir) || hasImages(c.DataDir)):
		// A flat folder of images goes to NewImageFolder too, which says what layout
		// it expects.
		spec, err = imageFolder(c)
	default:
		spec, err = fashionMNIST(c)
	}
	if err != nil {
		return nil, err
	}
	if c.Limit > 0 {
		spec.train = data.Head(spec.train, c.Limit)
		if spec.val != nil {
			spec.val = data.Head(spec.val, c.Limit)
		}
	}
	return spec, nil
}

// Upper bounds of the data-side sizes, checked before anything is read or allocated.
const (
	// maxImageSide is the largest --image-size: maxImageSide^2 is the most pixels within
	// PIL's Image.MAX_IMAGE_PIXELS (data.DefaultMaxImagePixels, 89,478,485).
	maxImageSide = 9459
	// maxBlockSize is the largest --block-size: the GPT's learned position table has a
	// row per position (Llama 3 has 131,072 positions).
	maxBlockSize = 1 << 20
	// maxTextBytes is the largest text file read into memory for byte-level windows.
	maxTextBytes = 2 << 30
)

// checkDataSizes range-checks the sizes that reach allocations of the data (and of the
// model it sizes), each with an upper bound, before anything is read.
func checkDataSizes(c Config) error {
	// The synthetic set holds Synthetic + Synthetic/5 samples (training and validation).
	if limit := data.MaxSamples() / 6 * 5; c.Synthetic > limit {
		return fmt.Errorf("--synthetic (synthetic in a config file) must be at most %d on this machine (an epoch's order takes 8 bytes a sample), got %d", limit, c.Synthetic)
	}
	if c.ImageSize > maxImageSide {
		return fmt.Errorf("--image-size (image_size in a config file) must be at most %d (%dx%d pixels is within PIL's Image.MAX_IMAGE_PIXELS, %d), got %d",
			maxImageSide, maxImageSide, maxImageSide, data.DefaultMaxImagePixels, c.ImageSize)
	}
	if c.BlockSize > maxBlockSize {
		return fmt.Errorf("--block-size (block_size in a config file) must be at most %d, got %d", maxBlockSize, c.BlockSize)
	}
	return nil
}

// blockSize is a text's context length: --block-size, 128 by default.
func blockSize(c Config) int {
	if c.BlockSize > 0 {
		return c.BlockSize
	}
	return 128
}

// csvTable reads a CSV file: --label-column holds the classes (integers, or names mapped
// to their sorted order), every other column is a feature; --val-split holds out rows.
func csvTable(c Config) (*dataSpec, error) {
	if c.LabelColumn == "" {
		return nil, fmt.Errorf("--data %s: a CSV file needs --label-column NAME (the column of class labels)", c.DataDir)
	}
	tab, err := data.ReadCSV(c.DataDir, data.CSVOptions{Label: c.LabelColumn})
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	// Integer labels are the class indices, bounded by data.DefaultMaxClasses.
	spec := &dataSpec{kind: "csv", train: tab, shape: []int64{int64(len(tab.Features))}, names: tab.Classes, classes: tab.NumClasses()}
	if c.ValSplit > 0 {
		if spec.train, spec.val, err = split(tab, c); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// tokenFile maps a file of uint16 token ids (nanoGPT's train.bin) as windows of
// --block-size; val.bin beside it validates, else the last --val-split of the windows.
// The vocabulary is vocab_size from nanoGPT's meta.pkl beside it, else the largest id
// + 1, found by one pass over the files that keeps none of the pages it reads.
func tokenFile(c Config) (*dataSpec, error) {
	dir := filepath.Dir(c.DataDir)
	vocab, fromMeta, err := data.NanoGPTVocabSize(dir)
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	open := func(path string) (*data.TokenDataset, error) {
		d, err := data.OpenTokens(path, blockSize(c), data.TokenOptions{VocabSize: vocab})
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		if !fromMeta {
			id, err := d.MaxID()
			if err != nil {
				return nil, fmt.Errorf("--data: %w", err)
			}
			vocab = max(vocab, int(id)+1)
		}
		return d, nil
	}
	tr, err := open(c.DataDir)
	if err != nil {
		return nil, err
	}
	spec := &dataSpec{kind: "tokens", train: tr, shape: []int64{int64(blockSize(c))}}
	if valPath := filepath.Join(dir, "val.bin"); valPath != c.DataDir && isFile(valPath) {
		if spec.val, err = open(valPath); err != nil {
			return nil, err
		}
	} else if c.ValSplit > 0 {
		n := int(float64(tr.Len()) * c.ValSplit)
		if n < 1 || n >= tr.Len() {
			return nil, fmt.Errorf("--val-split %g of %d windows leaves no training or no validation window", c.ValSplit, tr.Len())
		}
		// The last windows, not a random draw: neighbouring windows share text.
		spec.train, spec.val = &data.Subset{Dataset: tr, Indices: seq(0, tr.Len()-n)}, &data.Subset{Dataset: tr, Indices: seq(tr.Len()-n, tr.Len())}
	}
	spec.classes = vocab
	return spec, nil
}

func seq(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// split holds out --val-split of ds for validation, drawn with the seed.
func split(ds data.Dataset, c Config) (train, val data.Dataset, err error) {
	n := int(float64(ds.Len()) * c.ValSplit)
	if n < 1 || n >= ds.Len() {
		return nil, nil, fmt.Errorf("--val-split %g of %d samples leaves no training or no validation sample", c.ValSplit, ds.Len())
	}
	parts, err := data.RandomSplit(ds, []int{ds.Len() - n, n}, c.Seed)
	if err != nil {
		return nil, nil, err
	}
	return parts[0], parts[1], nil
}

func fashionMNIST(c Config) (*dataSpec, error) {
	tr, err := data.FashionMNIST(c.DataDir, true)
	if err != nil && c.DataDir != "" {
		return nil, fmt.Errorf("--data %s is neither an ImageFolder tree (it has no class folders, root/<class>/<image>) nor a Fashion-MNIST directory: %w", c.DataDir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (install Debian's dataset-fashion-mnist, pass --data DIR, or use --synthetic N)", err)
	}
	te, err := data.FashionMNIST(c.DataDir, false)
	if err != nil {
		return nil, err
	}
	norm := data.Normalize{Mean: data.FashionMNISTMean, Std: data.FashionMNISTStd}
	return &dataSpec{kind: "fashion-mnist", train: tr, val: te, shape: []int64{1, 28, 28}, classes: 10,
		names: data.FashionMNISTClasses, transform: norm}, nil
}

// hasImages reports whether dir holds a file with an image extension (a flat folder
// of images, which ImageFolder refuses with a message saying what it expects).
func hasImages(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if !e.IsDir() && slices.Contains(data.ImageExtensions, ext) {
			return true
		}
	}
	return false
}

func hasSubdirs(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// imageFolder reads root/train and root/val (or valid, test) when they exist, else root
// itself with --val-split held out. The images travel as uint8 and are normalized on the
// device; all are resized to --image-size (or to the first image's size, so that a tree
// of mixed sizes still batches). The small CNN takes 28x28 grayscale images, the other
// models RGB.
func imageFolder(c Config) (*dataSpec, error) {
	mode, mean, std := data.RGB, data.ImageNetMean, data.ImageNetStd
	if c.Model == "cnn" {
		mode, mean, std = data.Gray, []float32{0.5}, []float32{0.5}
	}
	opts := data.ImageFolderOptions{Mode: mode}
	root := c.DataDir
	trainDir, valDir := filepath.Join(root, "train"), ""
	if isDir(trainDir) {
		for _, v := range []string{"val", "valid", "validation", "test"} {
			if isDir(filepath.Join(root, v)) {
				valDir = filepath.Join(root, v)
				break
			}
		}
	} else {
		trainDir = root
	}
	tr, err := data.NewImageFolder(trainDir, opts)
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	spec := &dataSpec{kind: "imagefolder", train: tr, classes: len(tr.Classes), names: tr.Classes, mean: mean, std: std}
	switch {
	case valDir != "":
		va, err := data.NewImageFolder(valDir, opts)
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		if fmt.Sprint(va.Classes) != fmt.Sprint(tr.Classes) {
			return nil, fmt.Errorf("--data: %s has classes %v but %s has %v; both need the same class folders", valDir, va.Classes, trainDir, tr.Classes)
		}
		spec.val = va
	case c.ValSplit > 0:
		if spec.train, spec.val, err = split(tr, c); err != nil {
			return nil, err
		}
	}
	h, w := int64(c.ImageSize), int64(c.ImageSize)
	if c.Model == "cnn" {
		if c.ImageSize != 0 && c.ImageSize != 28 {
			return nil, fmt.Errorf("--image-size %d: the cnn model takes 28x28 images; use --model resnet18 or mlp for other sizes", c.ImageSize)
		}
		h, w = 28, 28
	}
	if h == 0 {
		var s data.Sample
		if err := tr.Get(0, &s); err != nil {
			return nil, err
		}
		shape := s.MustField(data.Input).Shape
		h, w = shape[1], shape[2]
	}
	spec.transform = data.Resize{Height: int(h), Width: int(w)}
	spec.shape = []int64{map[data.ColorMode]int64{data.RGB: 3, data.Gray: 1}[mode], h, w}
	return spec, nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// onDevice is the loader's OnDevice hook: uint8 images become normalized float32.
func (s *dataSpec) onDevice() func(b *data.Batch) {
	if s.mean == nil {
		return nil
	}
	return func(b *data.Batch) {
		b.Fields[data.Input] = data.NormalizeImages(b.Get(data.Input), s.mean, s.std)
	}
}

// inputFeatures is the number of values of one sample's input.
func (s *dataSpec) inputFeatures() int64 {
	n := int64(1)
	for _, d := range s.shape {
		n *= d
	}
	return n
}
