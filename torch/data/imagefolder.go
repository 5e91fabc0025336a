package data

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gotrain/gotrain/torch"
)

// ImageExtensions are the file extensions ImageFolder reads (compared in lower case),
// torchvision's IMG_EXTENSIONS.
var ImageExtensions = []string{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}

// ColorMode is the pixel layout ImageFolder converts every image to, as PIL's
// Image.convert(mode) does.
type ColorMode int

const (
	// RGB is three 8-bit channels (convert("RGB")): grayscale is replicated, alpha
	// dropped, palettes looked up. torchvision's default loader uses it.
	RGB ColorMode = iota
	// Gray is one 8-bit channel (convert("L")): color images become
	// L = (19595 R + 38470 G + 7471 B + 2^15) >> 16, PIL's ITU-R 601-2 luma.
	Gray
)

// ImageFile is one image of an ImageFolder.
type ImageFile struct {
	Path  string
	Class int
}

// ImageFolderOptions configures NewImageFolder.
type ImageFolderOptions struct {
	// Mode is the pixel layout of the decoded images (default RGB).
	Mode ColorMode
	// Float yields field Input as float32 in [0, 1] (torchvision's ToTensor) instead of
	// uint8. With uint8 the images travel to the device in a quarter of the bytes;
	// convert there with NormalizeImages, or in the workers with ToFloat.
	Float bool
	// SkipCorrupt replaces an image that fails to decode by the next one in the list
	// that decodes (with that one's class), and counts it (ImageFolder.Corrupt), instead
	// of failing the epoch with an error naming the file.
	SkipCorrupt bool
	// Extensions overrides ImageExtensions.
	Extensions []string
}

// ImageFolder is torchvision.datasets.ImageFolder: root/<class>/**/<image>, with class
// indices given by the sorted class folder names, and the images in torchvision's order
// (class by class, directories in sorted order of their paths, files sorted by name;
// symbolic links followed). Get decodes in the caller's goroutine (the loader's
// workers): JPEG with libjpeg-turbo, Pillow's decoder (Go's under build tag nolibjpeg
// or without cgo, and for CMYK or 12-bit JPEGs), PNG, GIF, BMP, TIFF and WebP with Go's
// decoders, binary PPM/PGM.
//
// A sample is field Input, the image as [C, H, W] (C = 3 for RGB, 1 for Gray), uint8
// or with Options.Float float32 in [0, 1], and field Label, the class index.
//
// PNG (and other lossless) pixels equal PIL's, and so do JPEG pixels decoded by
// libjpeg-turbo. Go's JPEG decoder has its own IDCT: its pixels differ from PIL's by a
// level or two here and there (the tests state and assert the bound).
type ImageFolder struct {
	Root       string
	Classes    []string
	ClassToIdx map[string]int
	Images     []ImageFile
	Options    ImageFolderOptions

	corruptMu sync.Mutex
	corrupt   []string
	skipped   atomic.Int64
}

// NewImageFolder lists root as torchvision.datasets.ImageFolder(root) does. It fails
// when root has no class folder, or a class folder holds no file with an image
// extension (torchvision raises FileNotFoundError then).
func NewImageFolder(root string, opts ImageFolderOptions) (*ImageFolder, error) {
	exts := opts.Extensions
	if exts == nil {
		exts = ImageExtensions
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("data: ImageFolder: %w", err)
	}
	d := &ImageFolder{Root: root, ClassToIdx: map[string]int{}, Options: opts}
	for _, e := range entries {
		if isDir(filepath.Join(root, e.Name()), e) {
			d.Classes = append(d.Classes, e.Name())
		}
	}
	slices.Sort(d.Classes)
	if len(d.Classes) == 0 {
		return nil, fmt.Errorf("data: ImageFolder: couldn't find any class folder in %s", root)
	}
	var empty []string
	for idx, class := range d.Classes {
		d.ClassToIdx[class] = idx
		dirs, err := walkDirs(filepath.Join(root, class))
		if err != nil {
			return nil, fmt.Errorf("data: ImageFolder: %w", err)
		}
		n := len(d.Images)
		for _, dir := range dirs {
			for _, name := range dir.files {
				if hasExtension(name, exts) {
					d.Images = append(d.Images, ImageFile{Path: filepath.Join(dir.path, name), Class: idx})
				}
			}
		}
		if len(d.Images) == n {
			empty = append(empty, class)
		}
	}
	if len(empty) > 0 {
		return nil, fmt.Errorf("data: ImageFolder: found no valid file for the classes %s; supported extensions are %s", strings.Join(empty, ", "), strings.Join(exts, ", "))
	}
	return d, nil
}

func hasExtension(name string, exts []string) bool {
	lower := strings.ToLower(name)
	for _, e := range exts {
		if strings.HasSuffix(lower, e) {
			return true
		}
	}
	return false
}

// isDir reports whether e is a directory or a symbolic link to one (os.scandir's
// is_dir() follows links).
func isDir(path string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

type walkedDir struct {
	path  string
	files []string
}

// walkDirs lists every directory under top (top included, links followed) with its
// non-directory entries sorted, the directories sorted by path: Python's
// sorted(os.walk(top, followlinks=True)) with sorted file names.
func walkDirs(top string) ([]walkedDir, error) {
	var out []walkedDir
	visiting := map[string]bool{}
	var walk func(dir string) error
	walk = func(dir string) error {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			if visiting[real] {
				return nil // a link cycle; os.walk would recurse until the OS stops it
			}
			visiting[real] = true
			defer delete(visiting, real)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		w := walkedDir{path: dir}
		var subdirs []string
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if isDir(p, e) {
				subdirs = append(subdirs, p)
			} else {
				w.files = append(w.files, e.Name())
			}
		}
		slices.Sort(w.files)
		out = append(out, w)
		for _, s := range subdirs {
			if err := walk(s); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(top); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b walkedDir) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

// Len returns the number of images.
func (d *ImageFolder) Len() int { return len(d.Images) }

// Corrupt returns the paths of the images that failed to decode and were skipped (with
// SkipCorrupt), in the order they were met, and how many times one was skipped.
func (d *ImageFolder) Corrupt() ([]string, int64) {
	d.corruptMu.Lock()
	defer d.corruptMu.Unlock()
	return slices.Clone(d.corrupt), d.skipped.Load()
}

// Get decodes image i into s.
func (d *ImageFolder) Get(i int, s *Sample) error {
	if i < 0 || i >= len(d.Images) {
		return fmt.Errorf("data: ImageFolder: index %d out of range [0, %d)", i, len(d.Images))
	}
	for k := range len(d.Images) {
		img := d.Images[(i+k)%len(d.Images)]
		err := d.decodeInto(img.Path, s)
		if err == nil {
			SetScalar(s, Label, int64(img.Class))
			return nil
		}
		if !d.Options.SkipCorrupt {
			return err
		}
		d.skipped.Add(1)
		d.corruptMu.Lock()
		if !slices.Contains(d.corrupt, img.Path) {
			d.corrupt = append(d.corrupt, img.Path)
		}
		d.corruptMu.Unlock()
	}
	return errors.New("data: ImageFolder: no image decodes")
}

func (d *ImageFolder) decodeInto(path string, s *Sample) error {
	buf := fileBufPool.Get().(*[]byte)
	defer fileBufPool.Put(buf)
	raw, err := readFileInto(path, (*buf)[:0])
	*buf = raw
	if err != nil {
		return fmt.Errorf("data: ImageFolder: %w", err)
	}
	// With Float the pixels are decoded into pooled scratch and scaled into the field.
	var tmp *[]byte
	var out []float32
	err = decodePlanar(raw, d.Options.Mode, func(c, h, w int) []byte {
		shape := []int64{int64(c), int64(h), int64(w)}
		if !d.Options.Float {
			return s.Set(Input, torch.Uint8, shape).Data
		}
		out = SetValues[float32](s, Input, shape...)
		tmp = scratchPool.Get().(*[]byte)
		*tmp = growBytes(*tmp, c*h*w)
		return *tmp
	})
	if tmp != nil {
		defer scratchPool.Put(tmp)
	}
	if err != nil {
		return fmt.Errorf("data: ImageFolder: %s: %w", path, err)
	}
	if tmp != nil {
		for k, v := range (*tmp)[:len(out)] {
			out[k] = unitLevels[v]
		}
	}
	return nil
}

var fileBufPool = sync.Pool{New: func() any { return new([]byte) }}

// readFileInto reads the file at path into buf's storage.
func readFileInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && int64(cap(buf)) < st.Size()+1 {
		buf = make([]byte, 0, st.Size()+512)
	}
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 4096)
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
