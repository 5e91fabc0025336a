package distributed_test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/distributed"
	"github.com/gotrain/gotrain/torch/distributed/disttest"
)

func TestMain(m *testing.M) {
	disttest.Main(m, map[string]func() error{
		"collectives": collectivesChild,
		"lost":        lostChild,
	})
}

func collectivesChild() error {
	pg, err := disttest.Join(10 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	r := float64(pg.Rank())
	var failed error
	torch.WithScope(func() {
		// Broadcast: rank 0's values everywhere, mixed dtypes in one call.
		a := torch.FromSlice([]float32{float32(r) + 1, float32(r) + 2})
		b := torch.FromSlice([]int64{int64(r) * 10})
		if err := pg.Broadcast([]*torch.Tensor{a, b}, 0); err != nil {
			failed = err
			return
		}
		if got := a.Float32s(); got[0] != 1 || got[1] != 2 || b.Int64s()[0] != 0 {
			failed = fmt.Errorf("broadcast: got %v %v", got, b.Int64s())
			return
		}
		// All-reduce sum and max.
		s := torch.FromSlice([]float64{r, 1})
		if err := pg.AllReduce([]*torch.Tensor{s}, distributed.Sum); err != nil {
			failed = err
			return
		}
		if got := s.Float64s(); got[0] != 1 || got[1] != 2 {
			failed = fmt.Errorf("all-reduce sum: got %v", got)
			return
		}
		m, err := pg.AllReduceFloat64s([]float64{r}, distributed.Max)
		if err != nil || m[0] != 1 {
			failed = fmt.Errorf("all-reduce max: got %v, %v", m, err)
			return
		}
		// Gradients: averaged, a tiny bucket size forces one bucket per parameter.
		p := torch.FromSlice([]float32{1, 1, 1})
		q := torch.FromSlice([]float32{2})
		p.SetRequiresGrad(true)
		q.SetRequiresGrad(true)
		p.MulScalar(r + 1).Sum().Add(q.MulScalar(2 * r).Sum()).Backward()
		if err := pg.AllReduceGradients([]*torch.Tensor{p, q}, 4); err != nil {
			failed = err
			return
		}
		if gp, gq := p.Grad().Float32s(), q.Grad().Float32s(); gp[0] != 1.5 || gq[0] != 1 {
			failed = fmt.Errorf("gradients: got %v %v", gp, gq)
			return
		}
	})
	if failed != nil {
		return failed
	}
	return pg.Barrier()
}

// lostChild: the rank named in GOTRAIN_TEST_DIE exits after the rendezvous; the others
// must fail their next collective with an error naming it.
func lostChild() error {
	pg, err := disttest.Join(5 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	if err := pg.Barrier(); err != nil {
		return err
	}
	if fmt.Sprint(pg.Rank()) == os.Getenv("GOTRAIN_TEST_DIE") {
		os.Exit(3)
	}
	time.Sleep(500 * time.Millisecond)
	_, err = pg.AllReduceFloat64s([]float64{1}, distributed.Sum)
	if err == nil {
		return fmt.Errorf("all-reduce after a peer died succeeded")
	}
	fmt.Fprintln(os.Stderr, "COLLECTIVE ERROR:", err)
	return nil
}

func TestCollectives(t *testing.T) {
	res := disttest.Spawn(t, "collectives", 2, nil)
	for r, c := range res {
		require.NoErrorf(t, c.Err, "rank %d:\n%s", r, c.Output)
	}
}

func TestLostRankIsAnErrorNamingIt(t *testing.T) {
	for _, die := range []int{1, 0} {
		t.Run(fmt.Sprint("rank", die), func(t *testing.T) {
			began := time.Now()
			res := disttest.Spawn(t, "lost", 2, []string{fmt.Sprint("GOTRAIN_TEST_DIE=", die)})
			assert.Less(t, time.Since(began), 30*time.Second)
			survivor := res[1-die]
			t.Log(survivor.Output)
			require.NoErrorf(t, survivor.Err, "%s", survivor.Output)
			assert.Contains(t, survivor.Output, fmt.Sprintf("lost rank %d", die))
		})
	}
}

func TestEnvOptions(t *testing.T) {
	set := func(kv map[string]string) {
		for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GOTRAIN_DIST_BACKEND"} {
			t.Setenv(k, kv[k])
		}
	}
	good := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
	set(good)
	o, err := distributed.EnvOptions()
	require.NoError(t, err)
	assert.Equal(t, distributed.Options{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29500}, o)

	for name, c := range map[string]struct {
		key, value, want string
	}{
		"no master addr":     {"MASTER_ADDR", "", "MASTER_ADDR is not set"},
		"no master port":     {"MASTER_PORT", "", "MASTER_PORT is not set"},
		"bad port":           {"MASTER_PORT", "70000", "not in 1..65535"},
		"rank >= world size": {"RANK", "2", "rank 2 is not in [0, 2)"},
		"bad world size":     {"WORLD_SIZE", "two", `WORLD_SIZE="two" is not an integer`},
		"bad backend":        {"GOTRAIN_DIST_BACKEND", "mpi", `backend "mpi" is not gloo, nccl`},
	} {
		t.Run(name, func(t *testing.T) {
			kv := map[string]string{}
			for k, v := range good {
				kv[k] = v
			}
			kv[c.key] = c.value
			set(kv)
			_, err := distributed.EnvOptions()
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "bad launch environment")
		})
	}
}

func TestPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = distributed.Init(distributed.Options{Rank: 0, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: 2 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("could not host the rendezvous store on 127.0.0.1:%d", port))
}

func TestUnreachableStore(t *testing.T) {
	port := disttest.FreePort(t)
	began := time.Now()
	_, err := distributed.Init(distributed.Options{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port, Timeout: 2 * time.Second})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "could not reach the rendezvous store"), err.Error())
	assert.Less(t, time.Since(began), 20*time.Second)
}

// TestBackendChoice: on a machine without a GPU the automatic choice is Gloo, asking for
// NCCL is an error that says why, and an unknown backend is refused before any
// rendezvous.
func TestBackendChoice(t *testing.T) {
	one := func(backend string) distributed.Options {
		return distributed.Options{WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: disttest.FreePort(t), Timeout: 10 * time.Second, Backend: backend}
	}
	if !torch.DistAvailable() {
		t.Skip("built with -tags nodist")
	}
	ok, why := distributed.NCCLAvailable()
	if !torch.CUDABuild {
		assert.False(t, ok)
		assert.Contains(t, why, "-tags cpu")
	} else if os.Getenv("CI") == "true" {
		// scripts/setup.sh installs the headers NCCL needs, so CI's CUDA build has it.
		assert.True(t, ok, "CUDA build without NCCL: %s", why)
	}
	if torch.CUDAIsAvailable() {
		t.Skip("a GPU is visible: the NCCL side is tested by the cuda-tagged tests")
	}

	pg, err := distributed.Init(one(""))
	require.NoError(t, err)
	assert.Equal(t, distributed.Gloo, pg.Backend())
	sum, err := pg.AllReduceFloat64s([]float64{2, 3}, distributed.Sum)
	require.NoError(t, err)
	assert.Equal(t, []float64{2, 3}, sum)
	pg.Close()

	_, err = distributed.Init(one("nccl"))
	require.Error(t, err)
	if ok {
		assert.Contains(t, err.Error(), "the NCCL backend needs a GPU for local rank 0, and 0 are visible")
	} else {
		assert.Contains(t, err.Error(), why)
	}

	_, err = distributed.Init(one("mpi"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `backend "mpi" is not gloo, nccl, or empty`)
}
