package data

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
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
	// MaxClasses bounds the classes of the label column (0: DefaultMaxClasses): integer
	// labels must lie in [0, MaxClasses), and there may be at most MaxClasses distinct
	// non-integer labels. A model sized by the classes allocates a row per class, so a
	// stray label such as 1099511627776 is an error naming its line, not an allocation.
	MaxClasses int
}

// DefaultMaxClasses is CSVOptions.MaxClasses's default, 2^20 classes (ImageNet-21k has
// 21,841).
const DefaultMaxClasses = 1 << 20

// csvChunkRows is how many rows one block of parsed values holds at most: values are
// kept in blocks, so that a large file never needs one reallocation-and-copy of
// everything read so far. A wide table's blocks hold fewer rows, so that a block stays
// within csvChunkBytes (and at least one row).
const (
	csvChunkRows  = 1 << 14
	csvChunkBytes = 16 << 20
)

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

	n         int
	blockRows int         // rows per block
	maxLabel  int64       // the largest label index (-1 without labels)
	inputs    [][]float32 // blocks of blockRows rows
	targets   [][]float32
	labels    [][]int64
}

// ReadCSV reads a CSV file with a header line. Errors name the file, line and column
// ("data.csv:17:4: ...") of a malformed row, a value that is not a number or a label out
// of range. A UTF-8 byte order mark before the header is dropped; a column name that
// appears twice, a file with no data rows and a path that is not a regular file are
// errors.
func ReadCSV(path string, opts CSVOptions) (*CSVDataset, error) {
	f, _, err := OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("data: ReadCSV: %w", err)
	}
	defer f.Close()
	maxClasses := opts.MaxClasses
	if maxClasses <= 0 {
		maxClasses = DefaultMaxClasses
	}
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
	// A UTF-8 byte order mark (Excel writes one) is not part of the first column's name;
	// pandas drops it too.
	header[0] = strings.TrimPrefix(header[0], "\ufeff")
	// One map from name to column, so that finding every column is linear in their
	// number; a name that appears twice is ambiguous (pandas would rename the second
	// "a.1", which the columns asked for by name could not mean).
	index := make(map[string]int, len(header))
	for i, name := range header {
		if j, dup := index[name]; dup {
			return nil, fmt.Errorf("data: %s:1: column name %q appears twice (columns %d and %d); column names must be unique", path, name, j+1, i+1)
		}
		index[name] = i
	}
	d := &CSVDataset{Path: path, Label: opts.Label, Targets: opts.Targets, maxLabel: -1}
	col := func(name string) (int, error) {
		if i, ok := index[name]; ok {
			return i, nil
		}
		return 0, fmt.Errorf("data: %s: no column %q in the header (columns: %s)", path, name, columnList(header))
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
		notFeature := map[string]bool{opts.Label: true}
		for _, t := range opts.Targets {
			notFeature[t] = true
		}
		for _, h := range header {
			if !notFeature[h] {
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
	d.blockRows = max(1, min(csvChunkRows, csvChunkBytes/(4*max(len(featureCols), len(targetCols), 1))))

	// Labels are kept as indices in order of first appearance and renumbered at the
	// end, once the sorted class list is known; where each first appeared is kept for
	// the error that a label out of range makes.
	type firstSeen struct{ line, column int }
	seen := map[string]int64{}
	var names []string
	var where []firstSeen
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
		row := d.n % d.blockRows
		if row == 0 {
			err := addBlock(d, &d.inputs, len(featureCols))
			if err == nil && len(targetCols) > 0 {
				err = addBlock(d, &d.targets, len(targetCols))
			}
			if err == nil && labelCol >= 0 {
				err = addBlock(d, &labelText, 1)
			}
			if err != nil {
				return nil, err
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
				line, column := r.FieldPos(labelCol)
				if len(names) == maxClasses {
					return nil, fmt.Errorf("data: %s:%d:%d: column %q: label %q is the %d-th distinct label, more than the %d classes allowed (CSVOptions.MaxClasses)",
						path, line, column, opts.Label, s, len(names)+1, maxClasses)
				}
				id = int64(len(names))
				seen[s] = id
				names = append(names, s)
				where = append(where, firstSeen{line, column})
				if _, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err != nil {
					allInts = false
				}
			}
			labelText[last] = append(labelText[last], id)
		}
		d.n++
	}
	if d.n == 0 {
		return nil, fmt.Errorf("data: %s: the header line is followed by no data rows; the dataset is empty", path)
	}
	if labelCol >= 0 {
		remap := make([]int64, len(names))
		if allInts {
			for i, s := range names {
				v, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
				if v < 0 || v >= int64(maxClasses) {
					return nil, fmt.Errorf("data: %s:%d:%d: column %q: integer label %d is outside [0, %d): integer labels are class indices, at most CSVOptions.MaxClasses of them",
						path, where[i].line, where[i].column, opts.Label, v, maxClasses)
				}
				remap[i] = v
				d.maxLabel = max(d.maxLabel, v)
			}
		} else {
			d.Classes = slices.Sorted(slices.Values(names))
			for i, s := range names {
				idx, _ := slices.BinarySearch(d.Classes, s)
				remap[i] = int64(idx)
			}
			d.maxLabel = int64(len(d.Classes) - 1)
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

// columnList names the columns for an error message, at most the first 20.
func columnList(header []string) string {
	if len(header) <= 20 {
		return strings.Join(header, ", ")
	}
	return fmt.Sprintf("%s, ... (%d in all)", strings.Join(header[:20], ", "), len(header))
}

// NumClasses returns the number of classes of the label column: len(Classes) for
// named labels, the largest integer label + 1 for integer ones, 0 without a label
// column.
func (d *CSVDataset) NumClasses() int { return int(d.maxLabel + 1) }

// addBlock appends to blocks an empty block of d.blockRows rows of width values, outside
// Go's heap (see offHeap).
func addBlock[T float32 | int64](d *CSVDataset, blocks *[][]T, width int) error {
	var zero T
	b, err := offHeap(d, d.blockRows*width*int(unsafe.Sizeof(zero)))
	if err == nil {
		*blocks = append(*blocks, viewAs[T](b)[:0])
	}
	return err
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
	b, row := i/d.blockRows, i%d.blockRows
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
