package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gotrain/gotrain/checkpoint"
)

// TokenDataset reads a flat file of token ids as fixed-length windows for language
// modelling. The file is nanoGPT's train.bin layout (np.array(ids, dtype=np.uint16)
// .tofile(path): little-endian ids back to back, no header), uint16 or uint32, or a
// plain-text corpus whose bytes are the tokens (ByteTokenizer). It is memory-mapped
// (read through pread where the address space has no room for it): opening it reads
// nothing, and a batch reads only the pages its windows cover, which
// are the kernel's file cache (dropped under memory pressure), not the process's heap,
// so a corpus larger than memory trains. MaxID reads the whole file once, in chunks
// that are not kept, for a vocabulary size that no meta.pkl gives.
//
// Sample i is the window starting at token i*Stride: field LMInputIDs, int64 of shape
// [BlockSize], tokens start .. start+BlockSize-1, and field Labels, the same window
// shifted by one (tokens start+1 .. start+BlockSize), which is nanoGPT's (x, y) pair
// read from block_size+1 tokens. A model that shifts its labels itself, as Hugging
// Face's causal language models do, takes LMInputIDs as its labels instead.
type TokenDataset struct {
	Path      string
	BlockSize int
	Stride    int
	// Width is the size of one token id in the file: 1 (bytes of text), 2 (uint16) or
	// 4 (uint32).
	Width int
	// VocabSize, when > 0, is the vocabulary: Get fails on a window holding an id at or
	// above it (which an embedding would reject less clearly, on the device).
	VocabSize int

	data []byte   // the mapped file
	file *os.File // or, when it could not be mapped, the file read through pread
	n    int      // tokens
}

// TokenOptions configures OpenTokens.
type TokenOptions struct {
	// Width is the size of a token id in bytes: 2 for uint16 (nanoGPT's, the default),
	// 4 for uint32 (vocabularies beyond 65536), 1 for a text file read through
	// ByteTokenizer.
	Width int
	// Stride is the distance between window starts, in tokens (default BlockSize: windows
	// that do not overlap; 1 reads every window, as nanoGPT's random offsets can).
	Stride int
	// VocabSize, when > 0, is the vocabulary size (nanoGPT's meta.pkl, see
	// NanoGPTVocabSize): Get checks every id against it.
	VocabSize int
}

// OpenTokens maps a token file and returns its windows of blockSize+1 tokens.
func OpenTokens(path string, blockSize int, opts TokenOptions) (*TokenDataset, error) {
	if blockSize < 1 {
		return nil, fmt.Errorf("data: OpenTokens: block size %d is not positive", blockSize)
	}
	d := &TokenDataset{Path: path, BlockSize: blockSize, Stride: opts.Stride, Width: opts.Width, VocabSize: opts.VocabSize}
	if d.Stride == 0 {
		d.Stride = blockSize
	}
	if d.Width == 0 {
		d.Width = 2
	}
	if d.Stride < 0 || (d.Width != 1 && d.Width != 2 && d.Width != 4) || d.VocabSize < 0 {
		return nil, fmt.Errorf("data: OpenTokens: stride %d, token width %d or vocabulary size %d is invalid (width 1, 2 or 4)", d.Stride, d.Width, d.VocabSize)
	}
	data, file, size, err := mapFile(d, path)
	if err != nil {
		return nil, fmt.Errorf("data: OpenTokens: %w", err)
	}
	if size%int64(d.Width) != 0 {
		return nil, fmt.Errorf("data: %s: %d bytes is not a whole number of %d-byte token ids", path, size, d.Width)
	}
	d.data, d.file, d.n = data, file, int(size/int64(d.Width))
	if blockSize >= d.n { // not d.n < blockSize+1, which overflows for the largest int
		return nil, fmt.Errorf("data: %s: %d tokens cannot fill one window of %d+1", path, d.n, blockSize)
	}
	return d, nil
}

// OpenText maps a plain-text file as a byte-level token corpus (token id = byte value,
// vocabulary 256), windows of blockSize+1 bytes.
func OpenText(path string, blockSize int) (*TokenDataset, error) {
	return OpenTokens(path, blockSize, TokenOptions{Width: 1})
}

// Tokens returns the number of tokens in the file.
func (d *TokenDataset) Tokens() int { return d.n }

// Token returns token id k of the file (0 if the file cannot be read there).
func (d *TokenDataset) Token(k int) int64 {
	var buf [4]byte
	b, err := d.bytes(k, 1, buf[:])
	if err != nil {
		return 0
	}
	return tokenAt(b, 0, d.Width)
}

// bytes returns the bytes of tokens k .. k+n-1: a slice of the mapping, or read into
// buf (which must hold them) when the file is not mapped.
func (d *TokenDataset) bytes(k, n int, buf []byte) ([]byte, error) {
	off, l := k*d.Width, n*d.Width
	if d.file == nil {
		return d.data[off : off+l], nil
	}
	if _, err := d.file.ReadAt(buf[:l], int64(off)); err != nil {
		return nil, fmt.Errorf("data: %s: reading tokens %d..%d: %w", d.Path, k, k+n-1, err)
	}
	return buf[:l], nil
}

// tokenAt decodes the little-endian id k of width bytes in b.
func tokenAt(b []byte, k, width int) int64 {
	switch width {
	case 1:
		return int64(b[k])
	case 2:
		return int64(binary.LittleEndian.Uint16(b[2*k:]))
	}
	return int64(binary.LittleEndian.Uint32(b[4*k:]))
}

// Len returns the number of windows: starts 0, Stride, 2*Stride, ... that leave
// BlockSize+1 tokens.
func (d *TokenDataset) Len() int { return (d.n-d.BlockSize-1)/d.Stride + 1 }

// Get writes window i into s.
func (d *TokenDataset) Get(i int, s *Sample) error {
	if i < 0 || i >= d.Len() {
		return fmt.Errorf("data: TokenDataset: index %d out of range [0, %d)", i, d.Len())
	}
	start, bs := i*d.Stride, int64(d.BlockSize)
	var buf []byte
	if d.file != nil {
		p := scratchPool.Get().(*[]byte)
		defer scratchPool.Put(p)
		*p = growBytes(*p, (d.BlockSize+1)*d.Width)
		buf = *p
	}
	win, err := d.bytes(start, d.BlockSize+1, buf)
	if err != nil {
		return err
	}
	ids := SetValues[int64](s, LMInputIDs, bs)
	labels := SetValues[int64](s, LMLabels, bs)
	prev := tokenAt(win, 0, d.Width)
	for k := range ids {
		next := tokenAt(win, k+1, d.Width)
		ids[k], labels[k] = prev, next
		prev = next
	}
	if v := int64(d.VocabSize); v > 0 {
		for k, id := range ids {
			if id >= v {
				return d.outOfVocab(start+k, id)
			}
		}
		if last := labels[len(labels)-1]; last >= v {
			return d.outOfVocab(start+len(ids), last)
		}
	}
	return nil
}

func (d *TokenDataset) outOfVocab(k int, id int64) error {
	return fmt.Errorf("data: %s: token %d (byte offset %d) is id %d, outside the vocabulary of %d", d.Path, k, k*d.Width, id, d.VocabSize)
}

// MaxID returns the largest token id in the file, reading it once in chunks of 1 MiB
// through a buffer that is reused (pread), not through the mapping: the pages read are
// file cache only, so a file larger than memory is scanned in constant memory. Holes
// of a sparse file (zeros) are skipped where the file system reports them.
func (d *TokenDataset) MaxID() (int64, error) {
	f, size, err := OpenRegular(d.Path)
	if err != nil {
		return 0, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	size = min(size, int64(d.n*d.Width))
	buf := make([]byte, 1<<20) // a multiple of every width
	var maxID uint32
	for off := int64(0); ; {
		start, end, ok := dataExtent(f, off, size)
		if !ok {
			break
		}
		// Extents are page-aligned, and so aligned to token ids.
		for off = start - start%int64(d.Width); off < end; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
			if n%d.Width != 0 || (err != nil && err != io.EOF) || n == 0 {
				return 0, fmt.Errorf("data: %s: reading token ids at byte %d: %v", d.Path, off+int64(n), err)
			}
			maxID = max(maxID, maxToken(buf[:n], d.Width))
			off += int64(n)
		}
	}
	return int64(maxID), nil
}

// maxToken is the largest little-endian id of width bytes in b.
func maxToken(b []byte, width int) uint32 {
	var m uint32
	for k := range len(b) / width {
		m = max(m, uint32(tokenAt(b, k, width)))
	}
	return m
}

// NanoGPTVocabSize reads vocab_size from nanoGPT's meta.pkl in dir (prepare.py writes it
// beside train.bin for character-level data sets), with checkpoint's pickle reader
// (pure Go, allowlisted, within a budget). ok is false when dir has no meta.pkl;
// nanoGPT then assumes GPT-2's vocabulary.
func NanoGPTVocabSize(dir string) (vocab int, ok bool, err error) {
	path := filepath.Join(dir, "meta.pkl")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	v, err := checkpoint.ReadPickle(path)
	if err != nil {
		return 0, true, fmt.Errorf("data: %w", err)
	}
	n, err := checkpoint.GetInt(v, "vocab_size")
	if err != nil {
		return 0, true, fmt.Errorf("data: %s: %w", path, err)
	}
	if n < 1 || n > 1<<32 {
		return 0, true, fmt.Errorf("data: %s: vocab_size %d is not in [1, 2^32]", path, n)
	}
	return int(n), true, nil
}

// ByteTokenizer is the byte-level tokenizer of OpenText: a token is a byte of UTF-8
// text, so any text encodes and the vocabulary is 256.
type ByteTokenizer struct{}

// VocabSize is 256.
func (ByteTokenizer) VocabSize() int { return 256 }

// Encode returns the bytes of text as token ids.
func (ByteTokenizer) Encode(text string) []int64 {
	return convert[int64]([]byte(text))
}

// Decode turns token ids back into text; an id outside 0..255 is an error.
func (ByteTokenizer) Decode(ids []int64) (string, error) {
	b := make([]byte, len(ids))
	for i, id := range ids {
		if id < 0 || id > 255 {
			return "", fmt.Errorf("data: ByteTokenizer: token id %d at %d is not a byte", id, i)
		}
		b[i] = byte(id)
	}
	return string(b), nil
}
