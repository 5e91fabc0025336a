// Command data measures the DataLoader on Fashion-MNIST: its throughput in samples per
// second with 1, 2 and 4 worker goroutines (batch tensors built on the consumer's
// goroutine, one scope per batch, as in training), and beside it the training
// throughput of a small CNN fed by the loader, with the share of step time spent
// waiting for data.
//
//	go run -tags cpu ./bench/data [-dir DIR] [-batch 128] [-workers 1,2,4] [-augment] [-train-steps 60]
//	go run -tags cpu ./bench/data -imagefolder [-images DIR] [-workers 1,2] [-batch 64] [-cpuprofile FILE]
//
// With -imagefolder it compares instead the loader on an ImageFolder tree of JPEGs
// (RandomResizedCrop 112 + RandomHorizontalFlip + ToTensor + Normalize, decoding in the
// workers) with torch.utils.data.DataLoader over torchvision.datasets.ImageFolder with
// the same transforms and as many worker processes (imagefolder.py); the tree, 2000
// Fashion-MNIST images colorized and upscaled to 128x128 JPEGs, is written by that
// script unless -images names one.
//
// The CNN is the usual Fashion-MNIST one (conv 32, conv 64, each 3x3 + ReLU + 2x2 max
// pool, linear 128, linear 10; cross-entropy; plain SGD) written with torch's functional
// ops, standing in for the trainer's default model. Without the data (Debian's
// dataset-fashion-mnist) the command falls back to a synthetic dataset of the same size
// and shape, and says so.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/data"
)

func main() {
	dir := flag.String("dir", "", "Fashion-MNIST directory (default "+data.DefaultFashionMNISTDir+")")
	batch := flag.Int("batch", 128, "batch size")
	workerList := flag.String("workers", "1,2,4", "comma-separated worker counts")
	augment := flag.Bool("augment", false, "random crop (padding 4) and horizontal flip before Normalize")
	trainSteps := flag.Int("train-steps", 60, "training steps per worker count (0 skips training)")
	dev := flag.String("device", "cpu", "device for batches and training (cpu, cuda, cuda:N)")
	imageFolder := flag.Bool("imagefolder", false, "compare the loader on an ImageFolder of JPEGs with PyTorch's DataLoader")
	images := flag.String("images", "", "with -imagefolder: the ImageFolder tree (default: write one into a temporary directory)")
	python := flag.String("python", ".venv/bin/python", "with -imagefolder: the Python with torch and torchvision")
	cpuProfile := flag.String("cpuprofile", "", "with -imagefolder: write a CPU profile of gotrain's loader runs to this file")
	flag.Parse()
	if *imageFolder {
		// The comparison's own defaults: the worker counts and batch size of the issue's
		// goal, unless given.
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["workers"] {
			*workerList = "1,2"
		}
		if !set["batch"] {
			*batch = 64
		}
		if err := compareImageFolder(*images, *python, *workerList, *batch, *cpuProfile); err != nil {
			log.Fatal(err)
		}
		return
	}
	device, err := torch.ParseDevice(*dev)
	if err != nil {
		log.Fatal(err)
	}

	ds, name := dataset(*dir)
	tf := data.Transform(data.Normalize{Mean: data.FashionMNISTMean, Std: data.FashionMNISTStd})
	if *augment {
		tf = data.Compose(data.RandomCrop{Height: 28, Width: 28, Padding: 4}, data.RandomHorizontalFlip{P: 0.5}, tf)
	}
	fmt.Printf("%s: %d samples, batch %d, augment %v, device %s, %d CPUs\n\n", name, ds.Len(), *batch, *augment, device, runtime.NumCPU())
	fmt.Printf("| workers | loader samples/s | CNN training samples/s | data wait share of step time |\n")
	fmt.Printf("|--------:|-----------------:|-----------------------:|-----------------------------:|\n")
	for _, f := range strings.Split(*workerList, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			log.Fatalf("bad -workers %q", *workerList)
		}
		l, err := data.NewLoader(ds, data.LoaderOptions{BatchSize: *batch, Shuffle: true, Workers: w, Seed: 1, Transform: tf, Device: device})
		if err != nil {
			log.Fatal(err)
		}
		readEpoch(l, 0, l.Len()) // warm-up: buffers, page cache, allocator
		n, elapsed := readEpoch(l, 1, l.Len())
		row := fmt.Sprintf("| %7d | %16.0f |", w, float64(n)/elapsed.Seconds())
		if *trainSteps > 0 {
			rate, share := train(l, device, *trainSteps)
			row += fmt.Sprintf(" %22.0f | %27.1f%% |", rate, 100*share)
		} else {
			row += " - | - |"
		}
		fmt.Println(row)
	}
}

// readEpoch reads up to steps batches of epoch and returns the samples read and the time
// taken.
func readEpoch(l *data.Loader, epoch, steps int) (int, time.Duration) {
	it := l.Iter(context.Background(), epoch, 0)
	defer it.Close()
	n := 0
	t0 := time.Now()
	for range steps {
		s := torch.NewScope()
		b, ok := it.Next()
		n += b.Size
		s.Close()
		if !ok {
			break
		}
	}
	if err := it.Err(); err != nil {
		log.Fatal(err)
	}
	return n, time.Since(t0)
}

// cnn is the benchmark model's parameters.
type cnn struct{ c1w, c1b, c2w, c2b, f1w, f1b, f2w, f2b *torch.Tensor }

func newCNN(dev torch.Device) *cnn {
	p := func(scale float64, shape ...int64) *torch.Tensor {
		s := torch.NewScope()
		t := torch.Randn(shape, torch.Float32, dev).MulScalar(scale)
		s.Keep(t)
		s.Close()
		return t.SetRequiresGrad(true)
	}
	return &cnn{
		c1w: p(1.0/3, 32, 1, 3, 3), c1b: p(0, 32),
		c2w: p(1.0/17, 64, 32, 3, 3), c2b: p(0, 64),
		f1w: p(1.0/56, 128, 64*7*7), f1b: p(0, 128),
		f2w: p(1.0/11, 10, 128), f2b: p(0, 10),
	}
}

func (m *cnn) params() []*torch.Tensor {
	return []*torch.Tensor{m.c1w, m.c1b, m.c2w, m.c2b, m.f1w, m.f1b, m.f2w, m.f2b}
}

func (m *cnn) forward(x *torch.Tensor) *torch.Tensor {
	same := torch.Conv2dOptions{Padding: [2]int64{1, 1}}
	pool := torch.Pool2dOptions{Kernel: [2]int64{2, 2}}
	x = torch.MaxPool2d(torch.Conv2d(x, m.c1w, m.c1b, same).ReLU(), pool)
	x = torch.MaxPool2d(torch.Conv2d(x, m.c2w, m.c2b, same).ReLU(), pool)
	x = torch.Linear(x.Flatten(1, -1), m.f1w, m.f1b).ReLU()
	return torch.Linear(x, m.f2w, m.f2b)
}

// train runs steps SGD steps fed by l (after a few warm-up steps) and returns the
// training throughput and the share of step time that Next spent waiting for data.
func train(l *data.Loader, dev torch.Device, steps int) (float64, float64) {
	m := newCNN(dev)
	defer func() {
		for _, p := range m.params() {
			p.Free()
		}
	}()
	const warmup = 5
	it := l.Iter(context.Background(), 2, 0)
	defer it.Close()
	var n int
	var t0 time.Time
	var wait0 time.Duration
	for step := range warmup + steps {
		if step == warmup {
			t0, wait0, n = time.Now(), it.WaitTime(), 0
		}
		s := torch.NewScope()
		b, ok := it.Next()
		if !ok {
			s.Close()
			if err := it.Err(); err != nil {
				log.Fatal(err)
			}
			it.Close()
			it = l.Iter(context.Background(), 3+step, 0)
			continue
		}
		loss := torch.CrossEntropy(m.forward(b.Get(data.Input)), b.Get(data.Label), torch.CrossEntropyOptions{})
		loss.Backward()
		torch.NoGrad(func() {
			for _, p := range m.params() {
				p.SubInPlace(p.Grad(), 0.01)
				p.SetGrad(nil)
			}
		})
		_ = loss.Item() // synchronizes with the device, as logging the loss does
		s.Close()
		n += b.Size
	}
	elapsed := time.Since(t0)
	return float64(n) / elapsed.Seconds(), (it.WaitTime() - wait0).Seconds() / elapsed.Seconds()
}

func dataset(dir string) (data.Dataset, string) {
	ds, err := data.FashionMNIST(dir, true)
	if err == nil {
		return ds, "Fashion-MNIST train"
	}
	fmt.Fprintf(os.Stderr, "no Fashion-MNIST (%v); using a synthetic dataset of the same size\n", err)
	syn, err := data.Synthetic(60000, 10, []int64{1, 28, 28}, 1)
	if err != nil {
		log.Fatal(err)
	}
	return syn, "synthetic 60000x1x28x28"
}
