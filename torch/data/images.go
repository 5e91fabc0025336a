package data

import (
	"fmt"
	"path/filepath"
)

// DefaultFashionMNISTDir is where Debian's dataset-fashion-mnist package installs
// Fashion-MNIST's four gzip files.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// FashionMNISTClasses are Fashion-MNIST's class names, indexed by label.
var FashionMNISTClasses = []string{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}

// ImageDataset is a set of 8-bit grayscale images with class labels, as MNIST and
// Fashion-MNIST are. Get returns field Input, an image as float32 values in [0, 1] of
// shape [1, H, W] (what torchvision's ToTensor makes of it), and field Label.
type ImageDataset struct {
	Pixels []byte // N*H*W bytes, image after image
	Labels []byte
	Height int
	Width  int
}

// FashionMNIST reads the Fashion-MNIST training set (train) or test set from dir, which
// holds {train,t10k}-{images-idx3,labels-idx1}-ubyte, each gzip-compressed (.gz) or raw.
// An empty dir means DefaultFashionMNISTDir.
func FashionMNIST(dir string, train bool) (*ImageDataset, error) {
	if dir == "" {
		dir = DefaultFashionMNISTDir
	}
	return MNIST(dir, train)
}

// MNIST reads an MNIST-format training set (train) or test set from dir, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte, each gzip-compressed (.gz) or raw.
func MNIST(dir string, train bool) (*ImageDataset, error) {
	split := "t10k"
	if train {
		split = "train"
	}
	images, err := findIDX(filepath.Join(dir, split+"-images-idx3-ubyte"))
	if err != nil {
		return nil, err
	}
	labels, err := findIDX(filepath.Join(dir, split+"-labels-idx1-ubyte"))
	if err != nil {
		return nil, err
	}
	return ReadImages(images, labels)
}

// findIDX prefers base+".gz" and falls back to the raw file, so that a missing dataset
// is reported under the name Debian installs it as.
func findIDX(base string) (string, error) {
	for _, p := range []string{base + ".gz", base} {
		if ok, err := exists(p); err != nil || ok {
			return p, err
		}
	}
	return "", fmt.Errorf("data: %s.gz not found (nor %s); install Debian's dataset-fashion-mnist package or pass the directory holding the IDX files", base, filepath.Base(base))
}

// ReadImages reads an IDX file of images (N x H x W bytes) and one of labels (N bytes).
// The errors name the file and say what is wrong: a wrong magic number, a truncated or
// corrupt file, or image and label counts that differ.
func ReadImages(imagesPath, labelsPath string) (*ImageDataset, error) {
	images, err := ReadIDX(imagesPath)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if len(images.Dims) != 3 {
		return nil, fmt.Errorf("data: idx: %s: images have %d dimensions %v, want 3 (count, height, width)", imagesPath, len(images.Dims), images.Dims)
	}
	labels, err := ReadIDX(labelsPath)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if len(labels.Dims) != 1 {
		return nil, fmt.Errorf("data: idx: %s: labels have %d dimensions %v, want 1 (count)", labelsPath, len(labels.Dims), labels.Dims)
	}
	if images.Dims[0] != labels.Dims[0] {
		return nil, fmt.Errorf("data: %s has %d images but %s has %d labels", imagesPath, images.Dims[0], labelsPath, labels.Dims[0])
	}
	return &ImageDataset{Pixels: images.Data, Labels: labels.Data, Height: images.Dims[1], Width: images.Dims[2]}, nil
}

// Len returns the number of images.
func (d *ImageDataset) Len() int { return len(d.Labels) }

// Get writes image i, scaled to [0, 1], and its label into s.
func (d *ImageDataset) Get(i int, s *Sample) error {
	if i < 0 || i >= len(d.Labels) {
		return fmt.Errorf("data: ImageDataset: index %d out of range [0, %d)", i, len(d.Labels))
	}
	px := d.Height * d.Width
	in := SetValues[float32](s, Input, 1, int64(d.Height), int64(d.Width))
	for k, b := range d.Pixels[i*px : (i+1)*px] {
		in[k] = float32(b) / 255
	}
	SetScalar(s, Label, int64(d.Labels[i]))
	return nil
}
