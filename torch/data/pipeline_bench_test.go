package data

import (
	"os"
	"testing"

	"github.com/gotrain/gotrain/torch/data/internal/libjpeg"
)

// BenchmarkImageFolderSample decodes and augments one JPEG as the loader's workers do;
// set GOTRAIN_BENCH_IMAGES to an ImageFolder tree.
func BenchmarkImageFolderSample(b *testing.B) {
	ds := benchImages(b)
	aug := Compose(RandomResizedCrop{Height: 112, Width: 112}, RandomHorizontalFlip{P: 0.5}, ToTensor(), Normalize{Mean: ImageNetMean, Std: ImageNetStd})
	w := newWorker(&Iter{})
	var s Sample
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Reset()
		if err := ds.Get(i%ds.Len(), &s); err != nil {
			b.Fatal(err)
		}
		w.pcg.Seed(1, uint64(i))
		if err := aug.Apply(&s, w.rng); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImageFolderStages times the stages of BenchmarkImageFolderSample apart.
func BenchmarkImageFolderStages(b *testing.B) {
	ds := benchImages(b)
	raw, _ := os.ReadFile(ds.Images[0].Path)
	b.Run("read", func(b *testing.B) {
		var buf []byte
		for i := 0; b.Loop(); i++ {
			buf, _ = readFileInto(ds.Images[i%ds.Len()].Path, buf[:0], 1<<30)
		}
	})
	px := make([]byte, 3*128*128)
	b.Run("libjpeg", func(b *testing.B) {
		if !libjpeg.Available {
			b.Skip("built without libjpeg")
		}
		for b.Loop() {
			hdr, _ := libjpeg.ReadHeader(raw)
			if err := libjpeg.Decode(raw, hdr, 3, px[:3*hdr.Width*hdr.Height]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-jpeg", func(b *testing.B) {
		for b.Loop() {
			decodeImage(raw)
		}
	})
	img, _ := decodeImage(raw)
	b.Run("go-planar", func(b *testing.B) {
		for b.Loop() {
			toPlanar(img, RGB, px)
		}
	})
	out := make([]byte, 3*112*112)
	b.Run("resize", func(b *testing.B) {
		for b.Loop() {
			resizeUint8(px, 3, 94, 94, 112, 112, out)
		}
	})
}

// benchImages opens the ImageFolder tree that GOTRAIN_BENCH_IMAGES names.
func benchImages(b *testing.B) *ImageFolder {
	root := os.Getenv("GOTRAIN_BENCH_IMAGES")
	if root == "" {
		b.Skip("GOTRAIN_BENCH_IMAGES is not set")
	}
	ds, err := NewImageFolder(root, ImageFolderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return ds
}
