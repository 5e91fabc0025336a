package data

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const pyLoadtxt = `
import json, sys
import numpy as np
path = sys.argv[1]
x = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(0, 1, 3), dtype=np.float32)
y = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(4,), dtype=np.float32)
species = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(2,), dtype=str)
classes, idx = np.unique(species, return_inverse=True)
print(json.dumps({"x": x.view(np.int32).flatten().tolist(), "y": y.view(np.int32).tolist(),
                  "classes": classes.tolist(), "labels": idx.tolist()}))
`

// writeCSV writes rows of numbers in assorted notations and string labels.
func writeCSV(t *testing.T, path string, rows int) {
	t.Helper()
	r := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	b.WriteString("sepal,petal,species,width,y\n")
	kinds := []string{"setosa", "versicolor", "virginica", "Zebra", "ant"}
	for i := range rows {
		num := func() string {
			v := r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3))
			switch i % 4 {
			case 0:
				return strconv.FormatFloat(v, 'g', -1, 64)
			case 1:
				return strconv.FormatFloat(v, 'e', 5, 64)
			case 2:
				return strconv.Itoa(int(v * 100))
			}
			return strconv.FormatFloat(v, 'f', 4, 32)
		}
		fmt.Fprintf(&b, "%s,%s,%s,%s,%s\n", num(), num(), kinds[r.IntN(len(kinds))], num(), num())
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
}

func TestCSVMatchesNumpyLoadtxt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "iris.csv")
	writeCSV(t, path, 500)
	var want struct {
		X, Y    []int32
		Classes []string
		Labels  []int64
	}
	require.NoError(t, json.Unmarshal(testpy.Run(t, pyLoadtxt, []string{"numpy"}, path), &want))

	ds, err := ReadCSV(path, CSVOptions{Label: "species", Features: []string{"sepal", "petal", "width"}})
	require.NoError(t, err)
	require.Equal(t, 500, ds.Len())
	assert.Equal(t, want.Classes, ds.Classes, "string labels become sorted classes")
	var x []float32
	var labels []int64
	var s Sample
	for i := range ds.Len() {
		s.Reset()
		require.NoError(t, ds.Get(i, &s))
		x = append(x, Values[float32](s.Field(Input))...)
		labels = append(labels, Scalar[int64](&s, Label))
	}
	assert.Equal(t, want.X, float32Bits(x))
	assert.Equal(t, want.Labels, labels)

	reg, err := ReadCSV(path, CSVOptions{Targets: []string{"y"}, Features: []string{"sepal", "petal", "width"}})
	require.NoError(t, err)
	var y []float32
	for i := range reg.Len() {
		s.Reset()
		require.NoError(t, reg.Get(i, &s))
		y = append(y, Values[float32](s.Field(Target))...)
		assert.False(t, s.Has(Label))
	}
	assert.Equal(t, want.Y, float32Bits(y))

	all, err := ReadCSV(path, CSVOptions{Label: "species"})
	require.NoError(t, err)
	assert.Equal(t, []string{"sepal", "petal", "width", "y"}, all.Features, "features default to the other columns")
}

func TestCSVErrorsNameFileLineColumn(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	p := write("bad.csv", "a,b,label\n1,2,3\n4,5,6\n7,x8,9\n")
	_, err := ReadCSV(p, CSVOptions{Label: "label"})
	assert.EqualError(t, err, "data: "+p+`:4:3: column "b": "x8" is not a number`)

	p = write("short.csv", "a,b,label\n1,2,3\n4,5\n")
	_, err = ReadCSV(p, CSVOptions{Label: "label"})
	assert.ErrorContains(t, err, p+":3:1: wrong number of fields")

	p = write("quote.csv", "a,b,label\n1,\"2,3\n")
	_, err = ReadCSV(p, CSVOptions{Label: "label"})
	assert.ErrorContains(t, err, p+":2:")

	_, err = ReadCSV(p, CSVOptions{Label: "kind"})
	assert.ErrorContains(t, err, `no column "kind" in the header (columns: a, b, label)`)

	ints, err := ReadCSV(write("ints.csv", "f,label\n0.5,3\n1.5,10\n"), CSVOptions{Label: "label"})
	require.NoError(t, err)
	assert.Nil(t, ints.Classes, "integer labels are the class indices")
	var s Sample
	require.NoError(t, ints.Get(1, &s))
	assert.Equal(t, int64(10), Scalar[int64](&s, Label))
}

// The CSV peak-memory test runs in a child process (this test binary, re-run with
// csvRSSEnv set) so that its peak RSS is the reading and loading alone.
const csvRSSEnv = "GOTRAIN_TEST_CSV_RSS"

func TestCSVLargeFileStreams(t *testing.T) {
	if path := os.Getenv(csvRSSEnv); path != "" {
		csvRSSChild(t, path)
		return
	}
	path := filepath.Join(t.TempDir(), "large.csv")
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintln(w, "f0,f1,f2,f3,f4,f5,f6,f7,f8,f9,f10,f11,label")
	r := rand.New(rand.NewPCG(1, 2))
	var size int64
	rows := 0
	for ; size < 200<<20; rows++ {
		line := make([]byte, 0, 160)
		for range 12 {
			line = strconv.AppendFloat(line, r.Float64()*1000-500, 'f', 6, 64)
			line = append(line, ',')
		}
		line = append(line, []string{"cat", "dog", "bird"}[rows%3]...)
		line = append(line, '\n')
		n, _ := w.Write(line)
		size += int64(n)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())

	cmd := exec.Command(os.Args[0], "-test.run=^TestCSVLargeFileStreams$", "-test.count=1")
	cmd.Env = append(os.Environ(), csvRSSEnv+"="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var res struct{ Rows, Batches, BaseKB, PeakKB int64 }
	line := out[strings.Index(string(out), "CSVRSS ")+len("CSVRSS "):]
	require.NoError(t, json.Unmarshal(line[:strings.IndexByte(string(line), '\n')], &res), "%s", out)
	assert.Equal(t, int64(rows), res.Rows)
	t.Logf("CSV of %d MB, %d rows: peak RSS %d MB (%d MB before reading)", size>>20, rows, res.PeakKB>>10, res.BaseKB>>10)
	// The baseline is libtorch's (about 390 MB of static initialisation and mapped
	// code in a CPU build), whatever the data; what the data adds is the measure.
	// Under the race detector (make test-race) its shadow memory doubles that allowance.
	assert.Less(t, (res.PeakKB-res.BaseKB)<<10, size*raceOverhead, "reading and loading the file adds less than its size, well under twice it")
}

// csvRSSChild reads the CSV, runs a loader epoch over it into tensors, and prints its
// row count and peak RSS (VmHWM) for the parent test.
func csvRSSChild(t *testing.T, path string) {
	scope := torch.NewScope()
	torch.FromSlice([]float32{1}).Free() // libtorch is loaded and warm before the baseline
	scope.Close()
	base := procStatusKB(t, "VmHWM")
	ds, err := ReadCSV(path, CSVOptions{Label: "label"})
	require.NoError(t, err)
	l := mustLoader(t, ds, LoaderOptions{BatchSize: 4096, Shuffle: true, Workers: 2, Seed: 1})
	it := l.Iter(context.Background(), 0, 0)
	batches := 0
	for {
		s := torch.NewScope()
		b, ok := it.Next()
		if ok {
			require.Equal(t, []int64{int64(b.Size), 12}, b.Get(Input).Shape())
			batches++
		}
		s.Close()
		if !ok {
			break
		}
	}
	require.NoError(t, it.Err())
	fmt.Printf("CSVRSS {\"Rows\": %d, \"Batches\": %d, \"BaseKB\": %d, \"PeakKB\": %d}\n", ds.Len(), batches, base, procStatusKB(t, "VmHWM"))
}

func procStatusKB(t *testing.T, key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			v, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}
