package data

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/gotrain/gotrain/torch"

	"github.com/gotrain/gotrain/internal/fsutil"
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
	// MaxImagePixels is PIL's Image.MAX_IMAGE_PIXELS (0: DefaultMaxImagePixels, 89,478,485).
	// As in PIL, an image of more pixels decodes with a warning (printed once per
	// ImageFolder through the log package, and listed by LargeImages), and one of more
	// than twice as many fails to decode with an *ImageTooLargeError (skipped with
	// SkipCorrupt) before a pixel buffer is allocated; the header alone is read. A
	// negative value lifts the limit as PIL's None does, except that an image whose
	// decoded pixels would not fit in this machine's memory is still refused.
	MaxImagePixels int64
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
	large     []string
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
	if st, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("data: ImageFolder: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("data: ImageFolder: %s is %s; ImageFolder reads a directory of class folders, root/<class>/<image>", root, fsutil.DescribeMode(st.Mode()))
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("data: ImageFolder: %w", err)
	}
	d := &ImageFolder{Root: root, ClassToIdx: map[string]int{}, Options: opts}
	images := 0
	for _, e := range entries {
		if isDir(filepath.Join(root, e.Name()), e) {
			d.Classes = append(d.Classes, e.Name())
		} else if hasExtension(e.Name(), exts) {
			images++
		}
	}
	slices.Sort(d.Classes)
	if len(d.Classes) == 0 {
		if images > 0 {
			return nil, fmt.Errorf("data: ImageFolder: %s holds %d images but no class folders; ImageFolder expects one folder per class, root/<class>/<image> (e.g. %s), and takes the class from the folder name",
				root, images, filepath.Join(root, "cat", "001.jpg"))
		}
		return nil, fmt.Errorf("data: ImageFolder: couldn't find any class folder in %s", root)
	}
	for _, class := range d.Classes {
		// Class names are saved as text (config.json, checkpoints): a name that is not
		// UTF-8 would train a whole epoch and then fail to save.
		if !utf8.ValidString(class) {
			return nil, fmt.Errorf("data: ImageFolder: class folder %s in %s: the name is not valid UTF-8; class names are saved as text in checkpoints and config.json, so rename the folder",
				strconv.Quote(class), root)
		}
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
	return slices.ContainsFunc(exts, func(e string) bool { return strings.HasSuffix(lower, e) })
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
// Every failure to read or decode a file counts: a truncated or corrupt file, a header
// beyond the pixel limit, a file that is not a regular file.
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

// LargeImages returns the paths of the decoded images above MaxImagePixels (and within
// twice it): PIL's DecompressionBombWarning cases.
func (d *ImageFolder) LargeImages() []string {
	d.corruptMu.Lock()
	defer d.corruptMu.Unlock()
	return slices.Clone(d.large)
}

func (d *ImageFolder) decodeInto(path string, s *Sample) error {
	limit := newPixelLimit(d.Options.MaxImagePixels)
	buf := fileBufPool.Get().(*[]byte)
	defer fileBufPool.Put(buf)
	// No image within the limit needs more than 8 bytes a pixel (16-bit RGBA,
	// uncompressed) and its headers.
	raw, err := readFileInto(path, (*buf)[:0], satAdd(satMul(2*limit.warn, 8), 1<<20))
	if cap(raw) <= 64<<20 { // a rare large file's buffer is not kept
		*buf = raw[:0]
	}
	if err != nil {
		return fmt.Errorf("data: ImageFolder: %w", err)
	}
	// With Float the pixels are decoded into pooled scratch and scaled into the field.
	var tmp *[]byte
	var out []float32
	large, err := decodePlanar(raw, d.Options.Mode, limit, func(c, h, w int) []byte {
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
	if large {
		d.warnLarge(path, limit)
	}
	if tmp != nil {
		for k, v := range (*tmp)[:len(out)] {
			out[k] = unitLevels[v]
		}
	}
	return nil
}

// warnLarge records an image above the warning threshold and prints the first, as
// PIL's DecompressionBombWarning prints once.
func (d *ImageFolder) warnLarge(path string, limit pixelLimit) {
	d.corruptMu.Lock()
	defer d.corruptMu.Unlock()
	if slices.Contains(d.large, path) {
		return
	}
	d.large = append(d.large, path)
	if len(d.large) == 1 {
		log.Printf("data: ImageFolder: %s has more than %d pixels (MaxImagePixels); it could be a decompression bomb (PIL's DecompressionBombWarning); images above twice this are refused", path, limit.warn)
	}
}

var fileBufPool = sync.Pool{New: func() any { return new([]byte) }}

// readFileInto reads the regular file at path into buf's storage: at most limit bytes
// (a larger file is an error, before anything is read), and never from a FIFO or a
// device (see OpenRegular).
func readFileInto(path string, buf []byte, limit int64) ([]byte, error) {
	f, size, err := OpenRegular(path)
	if err != nil {
		return buf, err
	}
	defer f.Close()
	if size > limit {
		return buf, fmt.Errorf("%s: %d bytes is more than the %d an image within the pixel limit can take", path, size, limit)
	}
	if int64(cap(buf)) < size+1 {
		buf = make([]byte, 0, size+512)
	}
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return buf, fmt.Errorf("%s: grew past %d bytes while being read", path, limit)
			}
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
