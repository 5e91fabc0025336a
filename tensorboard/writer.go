// Package tensorboard writes TensorBoard event files in pure Go.
//
// A Writer creates one events.out.tfevents.* file in a log directory (one directory
// per run, as TensorBoard's --logdir expects) and appends scalar and text summaries
// to it. The file uses TensorFlow's TFRecord framing with masked CRC-32C checksums,
// and the Event protocol buffers are encoded by hand with protowire, so the package
// needs neither generated code nor cgo: it builds with CGO_ENABLED=0.
//
// Scalars are written as torch.utils.tensorboard's SummaryWriter.add_scalar writes
// them by default (a float32 simple_value), text as its add_text does (the text
// plugin's string tensor, rendered as Markdown under TensorBoard's TEXT tab).
//
// ReadRecords and ReadEvents read event files back, checking every checksum; they
// exist for tests and small tools, not as a general TensorBoard reader.
package tensorboard

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// FileVersion is the file_version string of the first event in every event file.
const FileVersion = "brain.Event:2"

// ErrClosed is returned by a Writer's methods after Close.
var ErrClosed = errors.New("tensorboard: writer is closed")

// Defaults for when buffered events are written to the file. torch flushes every 10
// events or 120 seconds; a shorter interval lets TensorBoard, which tails the file,
// show per-epoch scalars of a slow run without waiting two minutes.
const (
	DefaultMaxPending    = 10
	DefaultFlushInterval = 10 * time.Second
)

// writerSeq numbers the writers of this process, like torch's global_uid, so that two
// writers opened in the same second in one directory get different file names.
var writerSeq atomic.Int64

// Writer appends summaries to one TensorBoard event file.
//
// Events are buffered and written to the file on Flush and Close, whenever
// MaxPending events are waiting, and at the latest FlushInterval after the oldest
// waiting event was added (a timer does this even when no further events come).
//
// A Writer is safe for concurrent use by multiple goroutines; events from concurrent
// calls are written in the order the calls take the Writer's lock. After an I/O
// error every method returns that error.
type Writer struct {
	mu            sync.Mutex
	path          string
	f             *os.File
	buf           *bufio.Writer
	pending       int
	maxPending    int
	flushInterval time.Duration
	timer         *time.Timer
	err           error
	closed        bool
	now           func() time.Time
}

// Option configures a Writer created by NewWriter.
type Option func(*Writer)

// WithMaxPending sets how many events may wait in the buffer before they are written
// to the file (DefaultMaxPending if n < 1).
func WithMaxPending(n int) Option {
	return func(w *Writer) {
		if n >= 1 {
			w.maxPending = n
		}
	}
}

// WithFlushInterval sets the longest time an event waits in the buffer before it is
// written to the file (DefaultFlushInterval if d <= 0).
func WithFlushInterval(d time.Duration) Option {
	return func(w *Writer) {
		if d > 0 {
			w.flushInterval = d
		}
	}
}

// NewWriter creates logdir (and its parents) if needed and a new event file in it,
// named events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n> as torch names
// them, and writes the file_version event. The file is new: NewWriter never appends
// to or replaces an existing file.
func NewWriter(logdir string, opts ...Option) (*Writer, error) {
	if err := os.MkdirAll(logdir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	w := &Writer{
		maxPending:    DefaultMaxPending,
		flushInterval: DefaultFlushInterval,
		now:           time.Now,
	}
	for _, o := range opts {
		o(w)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	now := w.now()
	for {
		name := fmt.Sprintf("events.out.tfevents.%010d.%s.%d.%d",
			now.Unix(), host, os.Getpid(), writerSeq.Add(1)-1)
		w.path = filepath.Join(logdir, name)
		w.f, err = os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue // a writer of another process with our pid, long gone: next number
		}
		if err != nil {
			return nil, fmt.Errorf("tensorboard: %w", err)
		}
		break
	}
	w.buf = bufio.NewWriterSize(w.f, 64<<10)
	if err := w.write(fileVersionEvent(wallTime(now))); err != nil {
		w.f.Close()
		os.Remove(w.path)
		return nil, err
	}
	if err := w.Flush(); err != nil {
		w.f.Close()
		os.Remove(w.path)
		return nil, err
	}
	return w, nil
}

// Path returns the path of the event file.
func (w *Writer) Path() string { return w.path }

// AddScalar adds one scalar summary. TensorBoard stores scalars as float32, so value
// is rounded to float32 precision.
func (w *Writer) AddScalar(tag string, value float64, step int64) error {
	return w.write(summaryEvent(wallTime(w.now()), step, scalarValue(nil, tag, value)))
}

// AddScalars adds several scalar summaries at one step, in one event, in sorted tag
// order. Each appears under its own tag, exactly as if added by AddScalar.
func (w *Writer) AddScalars(step int64, values map[string]float64) error {
	tags := make([]string, 0, len(values))
	for tag := range values {
		tags = append(tags, tag)
	}
	sort.Strings(tags)
	var summary []byte
	for _, tag := range tags {
		summary = scalarValue(summary, tag, values[tag])
	}
	return w.write(summaryEvent(wallTime(w.now()), step, summary))
}

// AddText adds a text summary, shown under TensorBoard's TEXT tab, which renders
// it as Markdown (indent it or fence it with ``` to show JSON or YAML verbatim).
func (w *Writer) AddText(tag, text string, step int64) error {
	return w.write(summaryEvent(wallTime(w.now()), step, textValue(nil, tag, text)))
}

// Flush writes all buffered events to the file.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	return w.flushLocked()
}

// Close flushes buffered events, syncs the file to stable storage and closes it.
// Calling Close again returns ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.closed = true
	err := w.flushLocked()
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("tensorboard: %w", err)
	}
	return nil
}

// write frames one encoded Event and buffers it, flushing when due.
func (w *Writer) write(event []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	if _, err := w.buf.Write(appendRecord(nil, event)); err != nil {
		w.err = fmt.Errorf("tensorboard: %w", err)
		return w.err
	}
	w.pending++
	if w.pending >= w.maxPending {
		return w.flushLocked()
	}
	if w.pending == 1 {
		if w.timer == nil {
			w.timer = time.AfterFunc(w.flushInterval, w.timedFlush)
		} else {
			w.timer.Reset(w.flushInterval)
		}
	}
	return nil
}

// timedFlush runs on the timer's goroutine; a failure is kept for the next call.
func (w *Writer) timedFlush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		_ = w.flushLocked()
	}
}

func (w *Writer) flushLocked() error {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.err != nil {
		return w.err
	}
	w.pending = 0
	if err := w.buf.Flush(); err != nil {
		w.err = fmt.Errorf("tensorboard: %w", err)
		return w.err
	}
	return nil
}

// wallTime is an Event's wall_time: Unix seconds with sub-second precision.
func wallTime(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}
