package checkpoint

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/fsutil"
)

const killChildEnv = "GOTRAIN_CHECKPOINT_KILL_CHILD"

// killCheckpoint is the checkpoint the child rewrites: iteration i, and a tensor whose
// every element is i, so that a torn or mixed file is detected.
func killCheckpoint(i int64) *Dict {
	const n = 1 << 18 // 1 MiB of int32
	data := make([]byte, 4*n)
	for j := 0; j < n; j++ {
		binary.LittleEndian.PutUint32(data[4*j:], uint32(i))
	}
	d := NewDict()
	d.Set("iteration", i)
	d.Set("weights", NewTensor(Int32, []int64{n}, data))
	return d
}

func verifyKillCheckpoint(path string) (int64, error) {
	v, err := Read(path)
	if err != nil {
		return 0, err
	}
	i, err := GetInt(v, "iteration")
	if err != nil {
		return 0, err
	}
	w, err := GetTensor(v, "weights")
	if err != nil {
		return 0, err
	}
	for j, x := range w.Float64s() {
		if int64(x) != i {
			return 0, fmt.Errorf("weights[%d] = %v in iteration %d", j, x, i)
		}
	}
	return i, nil
}

// TestKillDuringWrite rewrites one checkpoint in a child process (this test binary,
// re-executed), kills it with SIGKILL at random moments, and checks after every kill
// that the file reads back whole: the old or the new checkpoint, never a torn one.
// It continues until the children have completed at least 200 rewrites.
func TestKillDuringWrite(t *testing.T) {
	if path := os.Getenv(killChildEnv); path != "" {
		start, _ := strconv.ParseInt(os.Getenv(killChildEnv+"_START"), 10, 64)
		for i := start; ; i++ {
			if err := Write(path, killCheckpoint(i)); err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			fmt.Println(i)
		}
	}
	if testing.Short() {
		t.Skip("slow: rewrites a checkpoint 200 times")
	}
	path := filepath.Join(t.TempDir(), "ck.pt")
	require.NoError(t, Write(path, killCheckpoint(0)))
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	writes, kills, last := 0, 0, int64(0)
	for writes < 200 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringWrite$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+path, fmt.Sprintf("%s_START=%d", killChildEnv, last+1))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		done := make(chan int)
		go func() {
			n := 0
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				n++
			}
			done <- n
		}()
		time.Sleep(time.Duration(rng.Int63n(int64(150 * time.Millisecond))))
		require.NoError(t, cmd.Process.Kill())
		writes += <-done
		_ = cmd.Wait()
		kills++
		i, err := verifyKillCheckpoint(path)
		require.NoError(t, err, "after kill %d (%d writes)", kills, writes)
		require.GreaterOrEqual(t, i, last, "the checkpoint went back in time")
		last = i
	}
	t.Logf("%d rewrites, %d kills; last iteration %d", writes, kills, last)

	// The killed children left temporary files; the next write removes every one whose
	// writer is dead (fsutil.OrphanAge 0: no wait).
	defer func(age time.Duration) { fsutil.OrphanAge = age }(fsutil.OrphanAge)
	fsutil.OrphanAge = 0
	require.NoError(t, Write(path, killCheckpoint(last+1)))
	left, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".ck.pt.tmp-*"))
	require.NoError(t, err)
	require.Empty(t, left, "temporary files of killed writers")
}

// TestOrphanRemoval: a write removes the temporary files of dead writers of the same
// path that are older than fsutil.OrphanAge, and keeps live writers', young ones and other
// files.
func TestOrphanRemoval(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "last.pt")
	// A pid that is not running: a child that has exited and been reaped.
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	dead := cmd.Process.Pid
	touch := func(name string, age time.Duration) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("partial"), 0o644))
		old := time.Now().Add(-age)
		require.NoError(t, os.Chtimes(p, old, old))
		return p
	}
	deadOld := touch(fmt.Sprintf(".last.pt.tmp-%d-123", dead), time.Hour)
	deadYoung := touch(fmt.Sprintf(".last.pt.tmp-%d-456", dead), 0)
	live := touch(fmt.Sprintf(".last.pt.tmp-%d-789", os.Getppid()), time.Hour)
	other := touch(fmt.Sprintf(".best.pt.tmp-%d-123", dead), time.Hour)
	odd := touch(".last.pt.tmp-notapid", time.Hour)

	require.NoError(t, Write(path, killCheckpoint(1)))
	require.NoFileExists(t, deadOld)
	for _, p := range []string{deadYoung, live, other, odd} {
		require.FileExists(t, p)
	}
}
