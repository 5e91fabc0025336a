package torch_test

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/torch"
)

func TestFromSliceRoundTrip(t *testing.T) {
	torch.WithScope(func() {
		x := torch.FromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
		assert.Equal(t, []int64{2, 3}, x.Shape())
		assert.Equal(t, torch.Float32, x.DType())
		assert.Equal(t, []float32{1, 2, 3, 4, 5, 6}, x.Float32s())
		assert.Equal(t, []float32{1, 4, 2, 5, 3, 6}, x.T().Float32s(), "export follows logical order of a view")
		assert.Equal(t, []int64{3, 1}, x.Strides())
		assert.Equal(t, []bool{true, false}, torch.FromSlice([]bool{true, false}).Bools())
		assert.Equal(t, torch.Uint8, torch.FromSlice([]uint8{1}).DType())
		assert.Equal(t, 21.0, x.Sum().Item())
		assert.Equal(t, int64(5), torch.FromSlice([]int64{5}).ItemInt())
		assert.Panics(t, func() { torch.FromSlice([]float32{1, 2, 3}, 2, 2) })
	})
}

func TestCreation(t *testing.T) {
	torch.WithScope(func() {
		assert.Equal(t, []float64{0, 0}, torch.Zeros([]int64{2}, torch.Float64, torch.CPU).Float64s())
		assert.Equal(t, []int64{1, 1, 1}, torch.Ones([]int64{3}, torch.Int64, torch.CPU).Int64s())
		assert.Equal(t, []float32{2.5, 2.5}, torch.Full([]int64{2}, 2.5, torch.Float32, torch.CPU).Float32s())
		assert.Equal(t, []int64{0, 2, 4}, torch.Arange(0, 6, 2, torch.Int64, torch.CPU).Int64s())
		torch.ManualSeed(7)
		a := torch.Randn([]int64{5}, torch.Float32, torch.CPU).Float32s()
		torch.ManualSeed(7)
		b := torch.Randn([]int64{5}, torch.Float32, torch.CPU).Float32s()
		assert.Equal(t, a, b, "ManualSeed makes draws repeatable")
		r := torch.Randint(3, 5, []int64{100}, torch.Int64, torch.CPU).Int64s()
		for _, v := range r {
			assert.True(t, v == 3 || v == 4)
		}
		u := torch.Rand([]int64{100}, torch.Float32, torch.CPU)
		assert.True(t, u.GeScalar(0).All().Item() == 1 && u.LtScalar(1).All().Item() == 1)
	})
}

func TestRandomStreamsMatchPyTorch(t *testing.T) {
	out := testpy.Run(t, `
import torch
torch.manual_seed(1234)
print(" ".join(repr(v) for v in torch.randn(4).tolist()))
g = torch.Generator(); g.manual_seed(99)
print(" ".join(str(v) for v in torch.randperm(10, generator=g).tolist()))
`, []string{"torch"})
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	torch.WithScope(func() {
		torch.ManualSeed(1234)
		got := torch.Randn([]int64{4}, torch.Float32, torch.CPU).Float64s()
		for i, s := range strings.Fields(lines[0]) {
			want, _ := strconv.ParseFloat(s, 64)
			assert.Equal(t, want, got[i])
		}
	})
	var perm []string
	for _, v := range torch.RandpermSeeded(10, 99) {
		perm = append(perm, strconv.FormatInt(v, 10))
	}
	assert.Equal(t, lines[1], strings.Join(perm, " "))
}

func TestScopesFreeWhatTheyOwn(t *testing.T) {
	start := settledLive()
	var kept *torch.Tensor
	torch.WithScope(func() {
		s := torch.NewScope()
		a := torch.Ones([]int64{3}, torch.Float32, torch.CPU)
		b := a.MulScalar(2)
		kept = s.Keep(b.AddScalar(1))
		s.Close()
		assert.Equal(t, start+1, torch.LiveTensors(), "only the kept tensor survives the inner scope")
		assert.Equal(t, []float32{3, 3, 3}, kept.Float32s(), "a kept tensor moves to the enclosing scope")
	})
	assert.Equal(t, start, torch.LiveTensors(), "the outer scope frees the kept tensor")

	x := torch.Zeros([]int64{2}, torch.Float32, torch.CPU)
	assert.Equal(t, start+1, torch.LiveTensors())
	x.Free()
	x.Free()
	assert.Equal(t, start, torch.LiveTensors())
	assert.Panics(t, func() { x.Sum() }, "use after Free panics instead of crashing")
}

// TestScopeRenew: Renew frees what the scope owned and leaves a new scope, innermost as
// the old one was, owning what comes after; the old scope's tensors panic on use.
func TestScopeRenew(t *testing.T) {
	start := settledLive()
	s := torch.NewScope()
	old := torch.Ones([]int64{4}, torch.Float32, torch.CPU).MulScalar(3)
	require.Equal(t, start+2, torch.LiveTensors())
	s = s.Renew()
	assert.Equal(t, start, torch.LiveTensors(), "renew frees the old scope's tensors")
	assert.Panics(t, func() { old.Sum() }, "an old scope's tensor panics after Renew")
	x := torch.Full([]int64{2}, 7, torch.Float32, torch.CPU)
	assert.Equal(t, []float32{7, 7}, x.Float32s())
	inner := torch.NewScope()
	assert.Panics(t, func() { s.Renew() }, "only the innermost scope renews")
	inner.Close()
	assert.Equal(t, start+1, torch.LiveTensors(), "the renewed scope owns the new tensor")
	s.Close()
	assert.Equal(t, start, torch.LiveTensors())
	assert.Panics(t, func() { s.Renew() }, "a closed scope does not renew")
}

// TestHandlesFreedAnywhere: handles are counted and recycled per OS thread, so a tensor
// made on one thread and freed on another (as the runtime's cleanups do), even after the
// first thread has exited, still brings LiveTensors back, and a scope's many results (more than one block of Tensor cells, and
// more than a thread's cache of freed handles) each keep their own value.
func TestHandlesFreedAnywhere(t *testing.T) {
	start := settledLive()
	made := make(chan []*torch.Tensor)
	go func() {
		// Made on this thread, freed on another after this one is gone: a goroutine that
		// ends locked to its thread ends the thread.
		runtime.LockOSThread()
		var ts []*torch.Tensor
		for i := range 100 {
			ts = append(ts, torch.Full([]int64{1}, float64(i), torch.Float32, torch.CPU))
		}
		made <- ts
	}()
	ts := <-made
	runtime.LockOSThread()
	assert.Equal(t, start+100, torch.LiveTensors())
	for i, x := range ts {
		assert.Equal(t, float32(i), x.Float32s()[0])
		x.Free()
	}
	runtime.UnlockOSThread()
	assert.Equal(t, start, torch.LiveTensors(), "frees on another thread count")

	const n = 5000 // more results than the free-handle cache (4096) and many cell blocks
	torch.WithScope(func() {
		base := torch.Zeros([]int64{1}, torch.Float32, torch.CPU)
		ys := make([]*torch.Tensor, n)
		for i := range ys {
			ys[i] = base.AddScalar(float64(i))
		}
		assert.Equal(t, start+n+1, torch.LiveTensors())
		for _, i := range []int{0, 1, 63, 64, 4095, 4096, n - 1} {
			assert.Equal(t, float32(i), ys[i].Float32s()[0], "result %d", i)
		}
	})
	assert.Equal(t, start, torch.LiveTensors())
	torch.WithScope(func() { // reuses the freed handles
		a := torch.Ones([]int64{2}, torch.Float32, torch.CPU)
		assert.Equal(t, []float32{3, 3}, a.AddScalar(2).Float32s())
	})
	assert.Equal(t, start, torch.LiveTensors())
}

// TestScopesArePerGoroutine: goroutines with scopes of their own work at once, a
// scope never takes another goroutine's tensors, and a tensor made on a goroutine with no
// scope open survives other goroutines' scopes closing.
func TestScopesArePerGoroutine(t *testing.T) {
	start := settledLive()
	var free *torch.Tensor
	opened, made := make(chan struct{}), make(chan struct{})
	go func() { // no scope: its tensor is its own to Free
		<-opened
		free = torch.Full([]int64{2}, 5, torch.Float32, torch.CPU)
		close(made)
	}()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				torch.WithScope(func() {
					if g == 0 && i == 0 {
						close(opened)
						<-made // the other goroutine made its tensor while this scope is open
					}
					x := torch.Full([]int64{8}, float64(g), torch.Float32, torch.CPU)
					y := x.MulScalar(2).AddScalar(1)
					if got := y.Float32s()[0]; got != float32(2*g+1) {
						t.Errorf("goroutine %d step %d: got %v: a tensor was freed or swapped under it", g, i, got)
					}
				})
			}
		}()
	}
	wg.Wait()
	require.NotNil(t, free)
	assert.Equal(t, []float32{5, 5}, free.Float32s(), "another goroutine's scope must not free it")
	free.Free()
	assert.Equal(t, start, torch.LiveTensors())
	assert.Panics(t, func() {
		s := torch.NewScope()
		defer s.Close()
		ch := make(chan any)
		go func() {
			defer func() { ch <- recover() }()
			s.Close() // not the goroutine that opened it
		}()
		if r := <-ch; r != nil {
			panic(r)
		}
	})
}

func TestNoGradRestoresMode(t *testing.T) {
	require.True(t, torch.GradEnabled())
	torch.WithScope(func() {
		w := torch.Ones([]int64{2}, torch.Float32, torch.CPU).SetRequiresGrad(true)
		torch.NoGrad(func() {
			assert.False(t, torch.GradEnabled())
			assert.False(t, w.MulScalar(2).RequiresGrad())
			torch.NoGrad(func() {})
			assert.False(t, torch.GradEnabled(), "nested NoGrad restores the outer mode")
		})
		assert.True(t, torch.GradEnabled())
		assert.True(t, w.MulScalar(2).RequiresGrad())
	})
}

func TestErrors(t *testing.T) {
	torch.WithScope(func() {
		a := torch.Ones([]int64{2, 3}, torch.Float32, torch.CPU)
		b := torch.Ones([]int64{4, 5}, torch.Float32, torch.CPU)
		var terr *torch.Error
		func() {
			defer func() {
				r := recover()
				require.NotNil(t, r, "a shape mismatch panics")
				err, ok := r.(error)
				require.True(t, ok)
				require.True(t, errors.As(err, &terr))
			}()
			a.Matmul(b)
		}()
		assert.Equal(t, "matmul", terr.Op)
		assert.Contains(t, terr.Msg, "cannot be multiplied")
		assert.NotContains(t, terr.Msg, "Exception raised from", "no C++ backtrace in the message")
		assert.True(t, errors.Is(terr, torch.ErrInvalidArgument))

		err := func() (err error) {
			defer torch.Recover(&err, "allocating")
			torch.Empty([]int64{1 << 40, 1 << 20}, torch.Float32, torch.CPU)
			return nil
		}()
		require.Error(t, err)
		assert.True(t, errors.Is(err, torch.ErrOutOfMemory), "impossible allocation: %v", err)
		assert.Contains(t, err.Error(), "allocating: ")
	})

	_, err := torch.ParseDevice("gpu0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"cpu", "cuda" and "cuda:N"`)
	d, err := torch.ParseDevice("cuda:1")
	require.NoError(t, err)
	assert.Equal(t, torch.CUDA(1), d)
	assert.Equal(t, "cuda:1", d.String())
}

func TestStringPrintsLikePyTorch(t *testing.T) {
	exprs := []string{
		"torch.tensor([[1.5, -2.25], [3.0, 4.125]])",
		"torch.tensor([1.0, 2.0, 3.0])",
		"torch.tensor([1, 2, 30])",
		"torch.tensor(3.5)",
		"torch.tensor([True, False])",
		"torch.tensor([0.5, 1.0], dtype=torch.float64)",
		"torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)",
		"torch.ones(2, requires_grad=True)",
	}
	script := "import torch, sys\nfor e in sys.argv[1:]:\n    print(repr(eval(e)))\n    print('@@')\n"
	out := strings.Split(string(testpy.Run(t, script, []string{"torch"}, exprs...)), "@@\n")
	torch.WithScope(func() {
		got := []*torch.Tensor{
			torch.FromSlice([]float32{1.5, -2.25, 3, 4.125}, 2, 2),
			torch.FromSlice([]float32{1, 2, 3}),
			torch.FromSlice([]int64{1, 2, 30}),
			torch.FromSlice([]float32{3.5}).Reshape(),
			torch.FromSlice([]bool{true, false}),
			torch.FromSlice([]float64{0.5, 1}),
			torch.Arange(0, 24, 1, torch.Float32, torch.CPU).Reshape(2, 3, 4),
			torch.Ones([]int64{2}, torch.Float32, torch.CPU).SetRequiresGrad(true),
		}
		for i, g := range got {
			assert.Equal(t, strings.TrimSpace(out[i]), g.String(), exprs[i])
		}
	})
}

func TestVersions(t *testing.T) {
	v := torch.Version()
	assert.Regexp(t, `^2\.\d+\.\d+$`, v)
	assert.NotEmpty(t, torch.BLAS())
	assert.NoError(t, torch.CheckCUDARegistration())
	if !torch.CUDAIsAvailable() {
		assert.Equal(t, 0, torch.CUDADeviceCount())
		_, err := torch.CUDADeviceName(0)
		assert.Error(t, err)
	}
	if os.Getenv("GOTRAIN_EXPECT_TORCH") != "" {
		assert.Equal(t, os.Getenv("GOTRAIN_EXPECT_TORCH"), v)
	}
}

func TestRNGStateRestoresTheStream(t *testing.T) {
	torch.WithScope(func() {
		torch.ManualSeed(3)
		st := torch.RNGState(torch.CPU)
		a := torch.Rand([]int64{4}, torch.Float32, torch.CPU).Float32s()
		torch.SetRNGState(torch.CPU, st)
		b := torch.Rand([]int64{4}, torch.Float32, torch.CPU).Float32s()
		assert.Equal(t, a, b)
		assert.Equal(t, torch.Uint8, st.DType())
	})
}
