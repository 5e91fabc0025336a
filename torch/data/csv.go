package data

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// CSVOptions chooses the columns of a CSV file, by the names in its header line.
type CSVOptions struct {
	// Label is the column of class labels: a sample's field Label is its class index.
	// When every label is an integer, the integers are the indices; otherwise the
	// distinct labels, sorted, are the classes (CSVDataset.Classes) and a label's index
	// is its place among them. Leave it empty for regression.
	Label string
	// Targets are the columns of a regression target: field Target, float32 of shape
	// [len(Targets)].
	Targets []string
	// Features are the input columns, field Input, float32 of shape [len(Features)]. Nil
	// means every column that is not the label or a target.
	Features []string
	// Comma is the field delimiter (default ',').
	Comma rune
}

// csvChunkRows is how many rows one block of parsed values holds: values are kept in
// blocks, so that a large file never needs one reallocation-and-copy of everything
// read so far.
const csvChunkRows = 1 << 14

// CSVDataset is a table read from a CSV file: a header line naming the columns, then
// one sample per line, numbers parsed as float32 (Go's strconv, correctly rounded).
// The file is read streaming, in one pass, and only the parsed values are kept (4 bytes
// per value, plus 8 per label, outside Go's heap), so memory stays well below the
// file's size.
type CSVDataset struct {
	Path     string
	Features []string
	Targets  []string
	Label    string
	// Classes are the sorted distinct labels when they are not all integers (record them
	// with the run so that outputs map back to names); nil otherwise.
	Classes []string

	n       int
	inputs  [][]float32 // blocks of csvChunkRows rows
	targets [][]float32
	labels  [][]int64
}

// ReadCSV reads a CSV file with a header line. Errors name the file, line and column
// ("data.csv:17:4: ...") of a malformed row or a value that is not a number.
func ReadCSV(path string, opts CSVOptions) (*CSVDataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data: ReadCSV: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(bufio.NewReaderSize(f, 1<<20))
	if opts.Comma != 0 {
		r.Comma = opts.Comma
	}
	r.ReuseRecord = true
	header, err := r.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("data: %s: empty file; a CSV needs a header line", path)
	}
	if err != nil {
		return nil, csvError(path, err)
	}
	header = slices.Clone(header)
	d := &CSVDataset{Path: path, Label: opts.Label, Targets: opts.Targets}
	col := func(name string) (int, error) {
		if i := slices.Index(header, name); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("data: %s: no column %q in the header (columns: %s)", path, name, strings.Join(header, ", "))
	}
	labelCol := -1
	if opts.Label != "" {
		if labelCol, err = col(opts.Label); err != nil {
			return nil, err
		}
	}
	targetCols := make([]int, len(opts.Targets))
	for i, t := range opts.Targets {
		if targetCols[i], err = col(t); err != nil {
			return nil, err
		}
	}
	d.Features = opts.Features
	if d.Features == nil {
		for _, h := range header {
			if h != opts.Label && !slices.Contains(opts.Targets, h) {
				d.Features = append(d.Features, h)
			}
		}
	}
	featureCols := make([]int, len(d.Features))
	for i, name := range d.Features {
		if featureCols[i], err = col(name); err != nil {
			return nil, err
		}
	}
	if len(featureCols) == 0 {
		return nil, fmt.Errorf("data: %s: no feature columns", path)
	}

	// Labels are kept as indices in order of first appearance and renumbered at the
	// end, once the sorted class list is known.
	seen := map[string]int64{}
	var names []string
	allInts := true
	var labelText [][]int64
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, csvError(path, err)
		}
		row := d.n % csvChunkRows
		if row == 0 {
			in, err := offHeapBlock[float32](d, len(featureCols))
			if err != nil {
				return nil, err
			}
			d.inputs = append(d.inputs, in)
			if len(targetCols) > 0 {
				tg, err := offHeapBlock[float32](d, len(targetCols))
				if err != nil {
					return nil, err
				}
				d.targets = append(d.targets, tg)
			}
			if labelCol >= 0 {
				lb, err := offHeapBlock[int64](d, 1)
				if err != nil {
					return nil, err
				}
				labelText = append(labelText, lb)
			}
		}
		last := len(d.inputs) - 1
		for k, c := range featureCols {
			v, err := parseCSVFloat(r, path, rec, c, d.Features[k])
			if err != nil {
				return nil, err
			}
			d.inputs[last] = append(d.inputs[last], v)
		}
		for k, c := range targetCols {
			v, err := parseCSVFloat(r, path, rec, c, opts.Targets[k])
			if err != nil {
				return nil, err
			}
			d.targets[last] = append(d.targets[last], v)
		}
		if labelCol >= 0 {
			s := rec[labelCol]
			id, ok := seen[s]
			if !ok {
				id = int64(len(names))
				seen[s] = id
				names = append(names, s)
				if _, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err != nil {
					allInts = false
				}
			}
			labelText[last] = append(labelText[last], id)
		}
		d.n++
	}
	if labelCol >= 0 {
		remap := make([]int64, len(names))
		if allInts {
			for i, s := range names {
				remap[i], _ = strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			}
		} else {
			d.Classes = slices.Sorted(slices.Values(names))
			for i, s := range names {
				idx, _ := slices.BinarySearch(d.Classes, s)
				remap[i] = int64(idx)
			}
		}
		for _, block := range labelText {
			for i, id := range block {
				block[i] = remap[id]
			}
		}
		d.labels = labelText
	}
	return d, nil
}

// offHeapBlock returns an empty block of csvChunkRows rows of width values, outside Go's
// heap (see offHeap).
func offHeapBlock[T float32 | int64](d *CSVDataset, width int) ([]T, error) {
	var zero T
	b, err := offHeap(d, csvChunkRows*width*int(unsafe.Sizeof(zero)))
	if err != nil {
		return nil, err
	}
	return viewAs[T](b)[:0], nil
}

func parseCSVFloat(r *csv.Reader, path string, rec []string, c int, name string) (float32, error) {
	s := strings.TrimSpace(rec[c])
	v, err := strconv.ParseFloat(s, 32)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		line, column := r.FieldPos(c)
		return 0, fmt.Errorf("data: %s:%d:%d: column %q: %q is not a number", path, line, column, name, rec[c])
	}
	return float32(v), nil
}

// csvError gives a malformed-row error from encoding/csv the file:line:column form.
func csvError(path string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("data: %s:%d:%d: %v", path, pe.Line, pe.Column, pe.Err)
	}
	return fmt.Errorf("data: %s: %w", path, err)
}

// Len returns the number of rows.
func (d *CSVDataset) Len() int { return d.n }

// Get writes row i into s: field Input, and Label or Target.
func (d *CSVDataset) Get(i int, s *Sample) error {
	if i < 0 || i >= d.n {
		return fmt.Errorf("data: CSVDataset: index %d out of range [0, %d)", i, d.n)
	}
	b, row := i/csvChunkRows, i%csvChunkRows
	nf := len(d.Features)
	copy(SetValues[float32](s, Input, int64(nf)), d.inputs[b][row*nf:(row+1)*nf])
	if nt := len(d.Targets); nt > 0 {
		copy(SetValues[float32](s, Target, int64(nt)), d.targets[b][row*nt:(row+1)*nt])
	}
	if d.labels != nil {
		SetScalar(s, Label, d.labels[b][row])
	}
	return nil
}
