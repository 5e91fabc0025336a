// Package disttest runs multi-process distributed tests: a test binary re-executes
// itself once per rank, on 127.0.0.1 with a free port and torchrun's environment, and
// TestMain dispatches the child to a named function instead of running the tests.
package disttest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gotrain/gotrain/torch/distributed"
)

const childEnv = "GOTRAIN_DISTTEST_CHILD"

// Main is a TestMain: in a child it runs children[name] and exits (status 1 with the
// error on stderr when it fails); otherwise it runs the tests.
func Main(m *testing.M, children map[string]func() error) {
	name := os.Getenv(childEnv)
	if name == "" {
		os.Exit(m.Run())
	}
	f, ok := children[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "disttest: no child %q\n", name)
		os.Exit(2)
	}
	if err := f(); err != nil {
		fmt.Fprintf(os.Stderr, "rank %s: %v\n", os.Getenv("RANK"), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Result is one child's exit error (nil on success) and its combined output.
type Result struct {
	Err    error
	Output string
}

// Spawn starts world children running the named function with RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, plus env, and waits
// for them all (killing them after two minutes).
func Spawn(t testing.TB, name string, world int, env []string) []Result {
	t.Helper()
	ranks := make([]int, world)
	for r := range ranks {
		ranks[r] = r
	}
	return SpawnRanks(t, name, world, ranks, env)
}

// SpawnRanks is Spawn for the given ranks of a world of world ranks: a rank left out
// never joins, and one given twice is started twice. Result i is ranks[i]'s.
func SpawnRanks(t testing.TB, name string, world int, ranks []int, env []string) []Result {
	t.Helper()
	port := FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, len(ranks))
	outs := make([]*bytes.Buffer, len(ranks))
	for i, r := range ranks {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+name,
			fmt.Sprint("RANK=", r), fmt.Sprint("WORLD_SIZE=", world),
			fmt.Sprint("LOCAL_RANK=", r), fmt.Sprint("LOCAL_WORLD_SIZE=", world),
			"MASTER_ADDR=127.0.0.1", fmt.Sprint("MASTER_PORT=", port), "OMP_NUM_THREADS=1")
		cmd.Env = append(cmd.Env, env...)
		outs[i] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	res := make([]Result, len(ranks))
	for i, cmd := range cmds {
		res[i].Err = cmd.Wait()
		res[i].Output = outs[i].String()
	}
	return res
}

// Join joins the process group the environment describes, with the given collective
// timeout (the rendezvous timeout comes from GOTRAIN_RDZV_TIMEOUT, as in EnvOptions).
func Join(timeout time.Duration) (*distributed.ProcessGroup, error) {
	o, err := distributed.EnvOptions()
	if err != nil {
		return nil, err
	}
	o.Timeout = timeout
	return distributed.Init(o)
}
