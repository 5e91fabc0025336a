package serve

import (
	"fmt"

	"github.com/gotrain/gotrain/torch"
)

// BlockSize is the number of positions of one block of the KV pool.
const BlockSize = 16

// pool is the preallocated KV cache that every running sequence takes its blocks
// from, as vLLM's paged cache: per layer a keys and a values tensor [slots, heads,
// head_dim], slots = blocks × BlockSize, and per sequence the list of its blocks, so
// that no memory goes to padding or to another sequence's unused length. A sequence
// is given, when it is admitted, the blocks of its prompt plus its max_tokens (it never
// waits for memory in the middle of its generation, and no sequence is preempted);
// they return to the pool when it ends.
//
// Every position of every layer is kept, sliding-window layers included (they could
// keep only their window; not done yet).
type pool struct {
	blocks int64 // the pool's size in blocks
	free   []int32
	keys   []*torch.Tensor // per layer, [slots, H, D]; allocated by the first Update
	values []*torch.Tensor
	bytes  int64 // of all layers' tensors, once allocated
	// step is the forward being run: its rows' sequences and the gather index of their
	// positions (decode), set by the engine before each forward.
	step *poolStep
}

// poolStep describes one forward over the pool.
type poolStep struct {
	seqs []*sequence
	// write[i] lists the slots that row i's new positions go to, in order.
	write [][]int64
	// gather is, for a decode step, the slot of each of the B×L positions the rows
	// attend to (right-aligned, the padding pointing at slot 0), on the model's device;
	// nil for a prefill (B = 1, no past): the new keys are all there is.
	gather *torch.Tensor
	l      int64
}

func newPool(blocks int64) *pool {
	p := &pool{blocks: blocks}
	for b := blocks - 1; b >= 0; b-- {
		p.free = append(p.free, int32(b))
	}
	return p
}

// blocksFor returns the number of blocks n positions take.
func blocksFor(n int) int64 { return (int64(n) + BlockSize - 1) / BlockSize }

// take removes n blocks from the free list, or returns false when there are fewer.
func (p *pool) take(n int64) ([]int32, bool) {
	if int64(len(p.free)) < n {
		return nil, false
	}
	out := make([]int32, n)
	copy(out, p.free[int64(len(p.free))-n:])
	p.free = p.free[:int64(len(p.free))-n]
	return out, true
}

// give returns blocks to the free list.
func (p *pool) give(bs []int32) { p.free = append(p.free, bs...) }

// used returns the number of blocks held by sequences.
func (p *pool) used() int64 { return p.blocks - int64(len(p.free)) }

// slot returns the pool slot of position pos of a sequence with blocks bs.
func slot(bs []int32, pos int64) int64 { return int64(bs[pos/BlockSize])*BlockSize + pos%BlockSize }

// Update implements models.KVStore: it writes each row's new keys and values to its
// slots and returns what the rows attend to.
func (p *pool) Update(layer int, k, v *torch.Tensor) (keys, values *torch.Tensor) {
	for len(p.keys) <= layer {
		p.keys, p.values = append(p.keys, nil), append(p.values, nil)
	}
	if p.keys[layer] == nil {
		shape := []int64{p.blocks * BlockSize, k.Size(1), k.Size(3)}
		p.keys[layer] = torch.Zeros(shape, k.DType(), k.Device()).Escape()
		p.values[layer] = torch.Zeros(shape, v.DType(), v.Device()).Escape()
		p.bytes += 2 * shape[0] * shape[1] * shape[2] * int64(k.DType().Size())
	}
	s := p.step
	torch.NoGrad(func() {
		for i, slots := range s.write {
			kr := k.Select(0, int64(i)).Transpose(0, 1) // [T, H, D]
			vr := v.Select(0, int64(i)).Transpose(0, 1)
			// Positions within a block are contiguous slots: one copy per run.
			for t := 0; t < len(slots); {
				n := 1
				for t+n < len(slots) && slots[t+n] == slots[t]+int64(n) {
					n++
				}
				p.keys[layer].Narrow(0, slots[t], int64(n)).CopyFrom(kr.Narrow(0, int64(t), int64(n)), false)
				p.values[layer].Narrow(0, slots[t], int64(n)).CopyFrom(vr.Narrow(0, int64(t), int64(n)), false)
				t += n
			}
		}
	})
	if s.gather == nil {
		return k, v
	}
	b, h, d := k.Size(0), k.Size(1), k.Size(3)
	view := func(x *torch.Tensor) *torch.Tensor {
		return x.IndexSelect(0, s.gather).View(b, s.l, h, d).Permute(0, 2, 1, 3)
	}
	return view(p.keys[layer]), view(p.values[layer])
}

// close frees the pool's tensors.
func (p *pool) close() {
	for i := range p.keys {
		if p.keys[i] != nil {
			p.keys[i].Free()
			p.values[i].Free()
		}
	}
	p.keys, p.values = nil, nil
}

func (p *pool) String() string {
	return fmt.Sprintf("%d blocks of %d positions", p.blocks, BlockSize)
}
