package data

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gotrain/gotrain/torch"
)

// Loader reads a dataset in batches, like torch.utils.data.DataLoader, with worker
// goroutines instead of worker processes. Make one with NewLoader and read an epoch with
// Iter.
type Loader struct {
	ds        Dataset
	opts      LoaderOptions
	sampler   Sampler
	free      chan *hostBatch
	waitNanos atomic.Int64
	// resident holds the dataset's fields as tensors on the device (Resident), loaded by
	// the first Iter, outside every scope, in the sample's field order.
	resident    []residentField
	residentErr error
}

// residentField is one field of a Resident dataset.
type residentField struct {
	name string
	t    *torch.Tensor
}

// Dataset returns the data set the loader reads (DataLoader.dataset).
func (l *Loader) Dataset() Dataset { return l.ds }

// NewLoader returns a loader of ds. It fails on invalid options (a negative size, a rank
// outside the world).
func NewLoader(ds Dataset, opts LoaderOptions) (*Loader, error) {
	l := &Loader{ds: ds, opts: opts}
	if err := l.validate(); err != nil {
		return nil, err
	}
	return l, nil
}

// Bounds on LoaderOptions.Workers and Prefetch.
const (
	maxWorkers  = 1 << 12
	maxPrefetch = 1 << 16
)

func (l *Loader) validate() error {
	o := &l.opts
	if o.BatchSize == 0 {
		o.BatchSize = 1
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.Prefetch == 0 {
		o.Prefetch = 2 * o.Workers
	}
	if o.WorldSize == 0 {
		o.WorldSize = 1
	}
	if o.BatchSize < 0 || o.Workers < 0 || o.Prefetch < 0 {
		return fmt.Errorf("data: NewLoader: negative batch size %d, workers %d or prefetch %d", o.BatchSize, o.Workers, o.Prefetch)
	}
	// Each worker is a goroutine and each prefetched batch a buffer, made up front: the
	// bounds keep a mistyped number an error rather than an allocation that fails.
	if o.Workers > maxWorkers || o.Prefetch > maxPrefetch {
		return fmt.Errorf("data: NewLoader: workers %d or prefetch %d is more than the %d workers and %d batches a loader takes", o.Workers, o.Prefetch, maxWorkers, maxPrefetch)
	}
	if err := checkSamples("NewLoader", l.ds.Len()); err != nil {
		return err
	}
	if o.Resident {
		if _, ok := l.ds.(BatchReader); !ok {
			return fmt.Errorf("data: NewLoader: Resident needs a dataset that reads whole batches (a BatchReader such as TensorDataset), not %T", l.ds)
		}
		if o.Transform != nil || o.Collate != nil || len(o.Pad) > 0 {
			return fmt.Errorf("data: NewLoader: Resident batches are slices of the stored dataset: Transform, Collate and Pad cannot apply")
		}
	}
	l.sampler = o.Sampler
	if l.sampler == nil {
		s, err := NewDistributedSampler(l.ds.Len(), o.Rank, o.WorldSize, o.Shuffle, o.Seed, false)
		if err != nil {
			return err
		}
		l.sampler = s
	}
	l.free = make(chan *hostBatch, o.Prefetch+o.Workers+1)
	return nil
}

// Len returns the number of batches in an epoch: the sampler's length divided by the
// batch size, rounded up, or down with DropLast.
func (l *Loader) Len() int {
	n := l.sampler.Len()
	if l.opts.DropLast {
		return n / l.opts.BatchSize
	}
	return ceilDiv(n, l.opts.BatchSize)
}

// BatchSize is the number of samples of a full batch.
func (l *Loader) BatchSize() int { return l.opts.BatchSize }

// BatchDevice returns the device that every batch's tensors are on when Next returns
// it (LoaderOptions.Device), and false when an OnDevice hook may have put them
// elsewhere. The trainer uses it to skip asking each field for its device every batch.
func (l *Loader) BatchDevice() (torch.Device, bool) {
	if l.opts.OnDevice != nil {
		return torch.Device{}, false
	}
	if d := l.opts.Device; d.Type != torch.DeviceCPU {
		return d, true
	}
	return torch.CPU, true
}

// Sampler returns the sampler that orders the loader's epochs.
func (l *Loader) Sampler() Sampler { return l.sampler }

// WaitTime is the total time consumers of this loader's iterators have spent blocked in
// Next waiting for a batch that was not ready. The trainer reports it as a share of step
// time: near zero means data loading keeps up.
func (l *Loader) WaitTime() time.Duration { return time.Duration(l.waitNanos.Load()) }

func (l *Loader) getBuf() *hostBatch {
	select {
	case hb := <-l.free:
		return hb
	default:
		return &hostBatch{}
	}
}

func (l *Loader) putBuf(hb *hostBatch) {
	hb.err, hb.indices = nil, nil
	select {
	case l.free <- hb:
	default:
	}
}

// Iter reads epoch from batch start on. Batch k of an epoch is the same whatever batch
// the iterator started at, and batches before start are never read, so a resumed run
// continues an epoch exactly. Cancelling ctx stops the workers; Next then returns false
// and Err returns the context's error.
//
// The caller must call Close when it stops before the end (a deferred Close is always
// safe); an iterator that has run to its end or failed has already stopped its
// goroutines.
func (l *Loader) Iter(ctx context.Context, epoch, start int) *Iter {
	it := &Iter{l: l, epoch: epoch, next: start, start: start, end: l.Len()}
	it.ctx, it.cancel = context.WithCancel(ctx)
	if start < 0 || start > it.end {
		it.finish(fmt.Errorf("data: Iter: start batch %d is outside an epoch of %d batches", start, it.end))
		return it
	}
	if start == it.end {
		it.finish(nil)
		return it
	}
	it.order = l.sampler.EpochIndices(epoch)
	if l.opts.Resident {
		if err := l.loadResident(); err != nil {
			it.finish(err)
		}
		return it
	}
	if l.opts.Inline {
		it.inline = newWorker(it)
		return it
	}
	p := min(l.opts.Prefetch, it.end-start)
	it.slots = make([]chan *hostBatch, p)
	for i := range it.slots {
		it.slots[i] = make(chan *hostBatch, 1)
	}
	it.tokens = make(chan struct{}, p)
	it.claim.Store(int64(start))
	for range min(l.opts.Workers, it.end-start) {
		it.wg.Add(1)
		go it.work()
	}
	return it
}

// loadResident reads the whole dataset into tensors on the loader's device, once.
func (l *Loader) loadResident() (err error) {
	if l.resident != nil || l.residentErr != nil {
		return l.residentErr
	}
	defer func() { l.residentErr = err }()
	var s Sample
	if err := l.ds.(BatchReader).ReadBatch(arange(l.ds.Len()), &s); err != nil {
		return fmt.Errorf("data: reading the dataset into memory (Resident): %w", err)
	}
	defer torch.Recover(&err, "data: copying the dataset to "+l.opts.Device.String()+" (Resident)")
	var res []residentField
	torch.WithScope(func() {
		for k := range s.fields {
			f := &s.fields[k]
			res = append(res, residentField{f.Name, fieldTensor(f, l.opts.Device).Escape()})
		}
	})
	l.resident = res
	return nil
}

// Free releases what the loader holds in libtorch memory (a Resident dataset); a later
// epoch reads it again.
func (l *Loader) Free() {
	for _, f := range l.resident {
		f.t.Free()
	}
	l.resident, l.residentErr = nil, nil
}

// residentBatch slices batch b of the epoch from the resident dataset.
func (it *Iter) residentBatch() (Batch, bool) {
	if !it.more() {
		return Batch{}, false
	}
	if err := it.ctx.Err(); err != nil {
		it.finish(err)
		return Batch{}, false
	}
	idx := it.batchIndices(it.next)
	b := Batch{Index: it.next, Size: len(idx), Indices: idx, Fields: make(map[string]*torch.Tensor, len(it.l.resident))}
	var sel *torch.Tensor // the indices, when they are not consecutive
	if !consecutive(idx) {
		sel = toDevice(convert[int64](idx), it.l.opts.Device, nil)
	}
	for _, f := range it.l.resident {
		if sel == nil {
			b.Fields[f.name] = f.t.Narrow(0, int64(idx[0]), int64(len(idx)))
		} else {
			b.Fields[f.name] = f.t.IndexSelect(0, sel)
		}
	}
	it.next++
	if fn := it.l.opts.OnDevice; fn != nil {
		fn(&b)
	}
	return b, true
}

// Runs reports whether NextRun can hand out this iterator's batches: the loader is
// Resident with no OnDevice function, and its dataset has the named fields.
func (it *Iter) Runs(fields ...string) bool {
	if !it.l.opts.Resident || it.l.opts.OnDevice != nil || it.l.resident == nil {
		return false
	}
	for _, name := range fields {
		if it.l.residentField(name) == nil {
			return false
		}
	}
	return true
}

// NextRun hands out up to n of the epoch's next batches, as long as they are whole
// (BatchSize rows: a shorter last batch is left to Next), as a run that
// torch.Trace.RunBatches slices itself, instead of as Batches of tensors made one by
// one: b gets the resident tensors of the named fields, each batch's first row and size
// and, when a batch is not consecutive rows (a shuffled epoch), the epoch's order as an
// int64 tensor, which the iterator owns until it closes. Its batches hold the same rows
// as Next's would. It returns the index of the run's first batch, or false at the end
// of the epoch or of its whole batches, after an error or a cancel (see Err), or when
// Runs(fields...) is false. The run counts as handed out: a run that a step does not
// finish is not handed out again.
func (it *Iter) NextRun(n int, fields []string, b *torch.BatchRun) (first int, ok bool) {
	if n < 1 || !it.Runs(fields...) || !it.more() {
		return 0, false
	}
	if err := it.ctx.Err(); err != nil {
		it.finish(err)
		return 0, false
	}
	first = it.next
	bs := it.l.opts.BatchSize
	last := first
	for last < min(first+n, it.end) && len(it.batchIndices(last)) == bs {
		last++
	}
	if last == first {
		return 0, false
	}
	// Batch k is positions k*bs onwards of the order; when every batch of the run is
	// consecutive rows, it is named by its first row instead, and no order is needed.
	rows := true
	for k := first; k < last && rows; k++ {
		rows = consecutive(it.batchIndices(k))
	}
	b.Fields = b.Fields[:0]
	for _, name := range fields {
		b.Fields = append(b.Fields, it.l.residentField(name))
	}
	b.Order = nil
	if !rows {
		b.Order = it.orderTensor()
	}
	b.Starts, b.Sizes = b.Starts[:0], b.Sizes[:0]
	for k := first; k < last; k++ {
		idx := it.batchIndices(k)
		start := int64(k * bs)
		if rows {
			start = int64(idx[0])
		}
		b.Starts = append(b.Starts, start)
		b.Sizes = append(b.Sizes, int64(len(idx)))
	}
	it.next = last
	return first, true
}

// orderTensor is the epoch's order on the loader's device, made once per iterator.
func (it *Iter) orderTensor() *torch.Tensor {
	if it.orderT == nil {
		torch.WithScope(func() { it.orderT = toDevice(convert[int64](it.order), it.l.opts.Device, nil).Escape() })
	}
	return it.orderT
}

// residentField is the resident tensor of the named field, or nil.
func (l *Loader) residentField(name string) *torch.Tensor {
	for _, f := range l.resident {
		if f.name == name {
			return f.t
		}
	}
	return nil
}

// Iter is one pass over an epoch, from some batch to the end. Its methods are called
// from one goroutine, the one that uses the batches.
type Iter struct {
	l                *Loader
	epoch            int
	start, next, end int
	order            []int
	ctx              context.Context
	cancel           context.CancelFunc
	slots            []chan *hostBatch
	tokens           chan struct{}
	claim            atomic.Int64
	wg               sync.WaitGroup
	err              error
	wait             time.Duration
	done             bool
	inline           *worker       // set when batches are filled by Next itself
	orderT           *torch.Tensor // the order as a tensor, for NextRun
}

// Err returns the error that ended the iteration: a dataset or transform error, the
// context's error after a cancel, or nil after a normal end or Close.
func (it *Iter) Err() error { return it.err }

// WaitTime is the time Next has spent blocked waiting for a batch.
func (it *Iter) WaitTime() time.Duration { return it.wait }

// Close stops the workers and waits for them to exit. It is safe to call more than once
// and after the end.
func (it *Iter) Close() { it.finish(nil) }

func (it *Iter) finish(err error) {
	if it.done {
		return
	}
	it.done = true
	it.err = err
	if it.orderT != nil {
		it.orderT.Free()
		it.orderT = nil
	}
	it.cancel()
	it.wg.Wait()
	for _, s := range it.slots {
		select {
		case hb := <-s:
			it.l.putBuf(hb)
		default:
		}
	}
}

// more reports whether the epoch has a batch left to hand out, finishing the iterator
// at its end.
func (it *Iter) more() bool {
	if it.done {
		return false
	}
	if it.next >= it.end {
		it.finish(nil)
		return false
	}
	return true
}

// batchIndices are the dataset indices of batch b: a window of the epoch's order.
func (it *Iter) batchIndices(b int) []int {
	bs := it.l.opts.BatchSize
	return slices.Clip(it.order[b*bs : min((b+1)*bs, len(it.order))])
}

// nextHost waits for the next batch in order. The caller hands the buffer back with
// putBuf once it no longer needs it.
func (it *Iter) nextHost() (*hostBatch, bool) {
	if !it.more() {
		return nil, false
	}
	var hb *hostBatch
	if it.inline != nil {
		if err := it.ctx.Err(); err != nil {
			it.finish(err)
			return nil, false
		}
		hb = it.l.getBuf()
		it.inline.fill(hb, it.next)
	} else {
		slot := it.slots[(it.next-it.start)%len(it.slots)]
		select {
		case hb = <-slot:
		default:
			t0 := time.Now()
			select {
			case hb = <-slot:
			case <-it.ctx.Done():
			}
			d := time.Since(t0)
			it.wait += d
			it.l.waitNanos.Add(int64(d))
		}
		if hb == nil {
			it.finish(it.ctx.Err())
			return nil, false
		}
		<-it.tokens
	}
	if hb.err != nil {
		err := hb.err
		it.l.putBuf(hb)
		it.finish(err)
		return nil, false
	}
	it.next++
	return hb, true
}

// work fills batches until the epoch is claimed or the iterator stops. A token bounds
// how far workers run ahead of the consumer: batch b is only claimed once fewer than
// len(slots) batches are waiting, so batch b and b+len(slots) never share a slot.
func (it *Iter) work() {
	defer it.wg.Done()
	w := newWorker(it)
	for {
		select {
		case it.tokens <- struct{}{}:
		case <-it.ctx.Done():
			return
		}
		b := int(it.claim.Add(1) - 1)
		if b >= it.end {
			<-it.tokens
			return
		}
		hb := it.l.getBuf()
		w.fill(hb, b)
		select {
		case it.slots[(b-it.start)%len(it.slots)] <- hb:
		case <-it.ctx.Done():
			it.l.putBuf(hb)
			return
		}
	}
}

type worker struct {
	it      *Iter
	pcg     *rand.PCG
	rng     *rand.Rand
	sample  Sample
	samples []*Sample // one per position in the batch, for a user's CollateFunc
}

func newWorker(it *Iter) *worker {
	w := &worker{it: it, pcg: rand.NewPCG(0, 0)}
	w.rng = rand.New(w.pcg)
	return w
}

// fill reads, transforms and collates batch b into hb. With the default collation,
// samples are decoded straight into hb's storage when the dataset writes into the
// slices Sample.Set returns.
func (w *worker) fill(hb *hostBatch, b int) {
	it := w.it
	o := &it.l.opts
	hb.index = b
	hb.indices = it.batchIndices(b)
	hb.reset()
	defer func() {
		if p := recover(); p != nil {
			hb.err = fmt.Errorf("data: epoch %d batch %d: panic in dataset, transform or collate: %v\n%s", it.epoch, b, p, debug.Stack())
		}
	}()
	if br, ok := it.l.ds.(BatchReader); ok && o.Transform == nil && o.Collate == nil && len(o.Pad) == 0 {
		w.readBatch(br, hb, b)
		return
	}
	augSeed := mixSeed(o.Seed, it.epoch)
	for j, idx := range hb.indices {
		if j%8 == 0 && it.ctx.Err() != nil {
			hb.err = it.ctx.Err()
			return
		}
		s := &w.sample
		if o.Collate != nil {
			if j == len(w.samples) {
				w.samples = append(w.samples, new(Sample))
			}
			s = w.samples[j]
			s.Reset()
		} else {
			s.Reset()
			s.unlendAll()
			hb.lendTo(s)
		}
		err := it.l.ds.Get(idx, s)
		if t := o.Transform; t != nil && err == nil {
			w.pcg.Seed(augSeed, uint64(idx))
			err = t.Apply(s, w.rng)
		}
		if o.Collate == nil && err == nil {
			err = hb.add(s, len(hb.indices), o.Pad)
		}
		if err != nil {
			hb.err = fmt.Errorf("data: epoch %d batch %d: sample %d: %w", it.epoch, b, idx, err)
			return
		}
	}
	if o.Collate == nil {
		hb.finish()
		return
	}
	err := o.Collate(w.samples[:len(hb.indices)], &hb.out)
	if err == nil {
		err = hb.checkOut(false)
	}
	if err != nil {
		hb.err = fmt.Errorf("data: epoch %d batch %d: collate: %w", it.epoch, b, err)
	}
}

// readBatch fills hb with one ReadBatch call: no per-sample work, and consecutive rows
// are copied once, from the dataset into the batch tensor.
func (w *worker) readBatch(br BatchReader, hb *hostBatch, b int) {
	it := w.it
	if err := br.ReadBatch(hb.indices, &hb.out); err != nil {
		hb.err = fmt.Errorf("data: epoch %d batch %d: %w", it.epoch, b, err)
		return
	}
	if err := hb.checkOut(true); err != nil {
		hb.err = fmt.Errorf("data: epoch %d batch %d: ReadBatch: %w", it.epoch, b, err)
	}
}

// checkOut checks the collated fields: each one's data fits its shape and, with rows,
// its first dimension is the batch's samples.
func (hb *hostBatch) checkOut(rows bool) error {
	for k := range hb.out.fields {
		f := &hb.out.fields[k]
		if err := f.check(); err != nil {
			return err
		}
		if rows && (len(f.Shape) == 0 || f.Shape[0] != int64(len(hb.indices))) {
			return fmt.Errorf("field %q has shape %v, not [%d, ...]", f.Name, f.Shape, len(hb.indices))
		}
	}
	return nil
}

// mixSeed derives the augmentation stream of an epoch from the loader's seed (SplitMix64
// finalizer), so nearby seeds and epochs give unrelated streams.
func mixSeed(seed int64, epoch int) uint64 {
	z := uint64(seed) ^ (uint64(epoch)+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
