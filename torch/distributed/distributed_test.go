package distributed_test

import (
	"errors"
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
		"rendezvous":  rendezvousChild,
		"slow":        slowChild,
		"hung":        hungChild,
		"sharded":     shardedChild,
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
	// All-gather and reduce-scatter, in this launch rather than one of their own.
	if err := shardedCollectives(pg); err != nil {
		return err
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

// rendezvousChild joins and, when that fails, prints the error: the ranks of a
// rendezvous that cannot complete.
func rendezvousChild() error {
	pg, err := disttest.Join(10 * time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "JOIN ERROR:", err)
		return nil
	}
	pg.Close()
	return errors.New("joined a group whose ranks did not all arrive")
}

// slowChild: rank 1 reaches the all-reduce seconds after rank 0, longer than the
// rendezvous timeout but well within the collective timeout.
func slowChild() error {
	pg, err := disttest.Join(30 * time.Second)
	if err != nil {
		return err
	}
	defer pg.Close()
	if pg.Rank() == 1 {
		time.Sleep(3 * time.Second)
	}
	sum, err := pg.AllReduceFloat64s([]float64{1}, distributed.Sum)
	if err != nil {
		return err
	}
	if sum[0] != 2 {
		return fmt.Errorf("sum %v", sum)
	}
	return nil
}

// hungChild: rank 1 joins and then stops taking part (it is busy, stopped or stuck)
// for longer than the collective timeout; rank 0's all-reduce must fail naming it.
func hungChild() error {
	pg, err := disttest.Join(2 * time.Second)
	if err != nil {
		return err
	}
	if pg.Rank() == 1 {
		time.Sleep(8 * time.Second)
		os.Exit(0) // the group is rank 0's failure now: leave without a goodbye
	}
	_, err = pg.AllReduceFloat64s([]float64{1}, distributed.Sum)
	if err == nil {
		return errors.New("all-reduce with a hung peer succeeded")
	}
	fmt.Fprintln(os.Stderr, "COLLECTIVE ERROR:", err)
	pg.Close() // a failed group must not block the exit
	return nil
}

// TestRendezvousNamesMissingRanks: ranks 0 and 2 of 3 start, rank 1 never does; both
// fail at the rendezvous timeout (not the collective one) naming rank 1 only.
func TestRendezvousNamesMissingRanks(t *testing.T) {
	res := disttest.SpawnRanks(t, "rendezvous", 3, []int{0, 2}, []string{distributed.RendezvousTimeoutEnv + "=2s"})
	for i, c := range res {
		require.NoErrorf(t, c.Err, "rank %d:\n%s", 2*i, c.Output)
		assert.Contains(t, c.Output, "JOIN ERROR:")
		assert.Contains(t, c.Output, "rendezvous timed out after 2 s")
		assert.Contains(t, c.Output, "2 of 3 ranks arrived; rank 1 did not arrive")
	}
}

// TestRendezvousDuplicateRank: a second process with the same RANK is refused at once
// and named; the others then miss rank 2.
func TestRendezvousDuplicateRank(t *testing.T) {
	res := disttest.SpawnRanks(t, "rendezvous", 3, []int{0, 1, 1}, []string{distributed.RendezvousTimeoutEnv + "=3"})
	twice, missing := 0, 0
	for _, c := range res {
		require.NoError(t, c.Err, c.Output)
		if strings.Contains(c.Output, "rank 1 arrived twice") {
			twice++
		}
		if strings.Contains(c.Output, "rank 2 did not arrive") {
			missing++
		}
	}
	assert.Equal(t, 1, twice, "%+v", res)
	assert.Equal(t, 2, missing, "%+v", res)
}

// TestCollectiveTimeoutIsNotTheRendezvousTimeout: a peer that is late to a collective
// by more than the rendezvous timeout is not an error.
func TestCollectiveTimeoutIsNotTheRendezvousTimeout(t *testing.T) {
	res := disttest.Spawn(t, "slow", 2, []string{distributed.RendezvousTimeoutEnv + "=1s"})
	for r, c := range res {
		require.NoErrorf(t, c.Err, "rank %d:\n%s", r, c.Output)
	}
}

// TestHungRankIsNamed: a rank that stops taking part ends its peer's collective at the
// collective timeout, with an error that names it.
func TestHungRankIsNamed(t *testing.T) {
	res := disttest.Spawn(t, "hung", 2, nil)
	require.NoErrorf(t, res[0].Err, "%s", res[0].Output)
	assert.Contains(t, res[0].Output, "lost rank 1")
}

func TestParseTimeout(t *testing.T) {
	for s, want := range map[string]time.Duration{"90s": 90 * time.Second, "5m": 5 * time.Minute, "90": 90 * time.Second, "0.5": 500 * time.Millisecond} {
		d, err := distributed.ParseTimeout(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, d, s)
	}
	for _, s := range []string{"", "0", "-1s", "soon", "1e300", "NaN"} {
		_, err := distributed.ParseTimeout(s)
		assert.Error(t, err, s)
	}
}

// TestGPUShortage: the launcher's and a rank's checks say how many ranks and GPUs there
// are and what CUDA_VISIBLE_DEVICES holds.
func TestGPUShortage(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "0")
	require.NoError(t, distributed.CheckGPUs(2, 2))
	err := distributed.CheckGPUs(2, 1)
	var gs *distributed.GPUShortageError
	require.ErrorAs(t, err, &gs)
	assert.Equal(t, `2 ranks on this node need one GPU each, but 1 GPU is visible (CUDA_VISIBLE_DEVICES="0")`, err.Error())

	require.NoError(t, distributed.CheckRankGPU(distributed.Options{Rank: 3, LocalRank: 0, LocalWorldSize: 2}, 1))
	err = distributed.CheckRankGPU(distributed.Options{Rank: 3, LocalRank: 1, LocalWorldSize: 2}, 1)
	require.ErrorAs(t, err, &gs)
	assert.Equal(t, `rank 3 (LOCAL_RANK 1) has no GPU: 2 ranks on this node need one GPU each, but 1 GPU is visible (CUDA_VISIBLE_DEVICES="0")`, err.Error())

	os.Unsetenv("CUDA_VISIBLE_DEVICES")
	err = distributed.CheckRankGPU(distributed.Options{Rank: 2, LocalRank: 2}, 0)
	assert.EqualError(t, err, "rank 2 (LOCAL_RANK 2) has no GPU: 3 ranks on this node need one GPU each, but 0 GPUs are visible (CUDA_VISIBLE_DEVICES is not set)")
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
		for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GOTRAIN_DIST_BACKEND",
			distributed.RendezvousTimeoutEnv, "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"} {
			t.Setenv(k, kv[k])
		}
	}
	good := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
	set(good)
	o, err := distributed.EnvOptions()
	require.NoError(t, err)
	assert.Equal(t, distributed.Options{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29500}, o)

	// torchrun's agent: its store, its restart count; a rendezvous timeout in seconds.
	agent := map[string]string{distributed.RendezvousTimeoutEnv: "90", "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "2"}
	for k, v := range good {
		agent[k] = v
	}
	set(agent)
	o, err = distributed.EnvOptions()
	require.NoError(t, err)
	assert.Equal(t, distributed.Options{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29500,
		RendezvousTimeout: 90 * time.Second, AgentStore: true, Attempt: 2}, o)
	set(good)

	for name, c := range map[string]struct {
		key, value, want string
	}{
		"no master addr":     {"MASTER_ADDR", "", "MASTER_ADDR is not set"},
		"no master port":     {"MASTER_PORT", "", "MASTER_PORT is not set"},
		"bad port":           {"MASTER_PORT", "70000", "not in 1..65535"},
		"rank >= world size": {"RANK", "2", "rank 2 is not in [0, 2)"},
		"bad world size":     {"WORLD_SIZE", "two", `WORLD_SIZE="two" is not an integer`},
		"bad backend":        {"GOTRAIN_DIST_BACKEND", "mpi", `backend "mpi" is not gloo, nccl`},
		"bad rdzv timeout":   {distributed.RendezvousTimeoutEnv, "soon", `GOTRAIN_RDZV_TIMEOUT="soon": not a duration`},
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
	_, err := distributed.Init(distributed.Options{Rank: 1, WorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: port, RendezvousTimeout: 2 * time.Second})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "could not reach the rendezvous store"), err.Error())
	assert.Contains(t, err.Error(), "rank 0, which hosts it, did not arrive")
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
