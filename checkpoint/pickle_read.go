package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// maxStandalonePickle bounds a standalone pickle file; the ones read beside datasets
// (nanoGPT's meta.pkl) are kilobytes.
const maxStandalonePickle = 64 << 20

// ReadPickle decodes a standalone pickle of any protocol (0-5), such as nanoGPT's
// meta.pkl, with Read's allowlist and budget: plain containers, numbers, strings and
// bytes come back as Read returns them, and any other global is refused. The file must
// be a regular file of at most 64 MiB.
func (o ReadOptions) ReadPickle(path string) (any, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a FIFO fails at Stat instead of blocking the open
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	switch {
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("checkpoint: %s is not a regular file (%s)", path, st.Mode().Type())
	case st.Size() > maxStandalonePickle:
		return nil, fmt.Errorf("checkpoint: %s: a pickle of %d bytes is larger than the %d this reader takes", path, st.Size(), maxStandalonePickle)
	}
	data := make([]byte, st.Size())
	if err := readAt(f, data, 0); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	v, err := newUnpickler(data, nil, o.budget(st.Size())).load()
	if errors.Is(err, errTruncated) {
		err = errors.New("pickle data truncated")
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return v, nil
}

// ReadPickle decodes the standalone pickle at path within the default budget (see
// ReadOptions.ReadPickle).
func ReadPickle(path string) (any, error) { return ReadOptions{}.ReadPickle(path) }
