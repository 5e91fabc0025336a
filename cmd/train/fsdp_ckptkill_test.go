package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/checkpoint"
	"github.com/gotrain/gotrain/internal/testsupport"
	"github.com/gotrain/gotrain/trainer"
)

// TestLaunchFSDPCkptKillDuringSave: under --fsdp, a rank killed in the middle of writing
// its file of a sharded save (held there with SIGSTOP from the moment its temporary file
// appears in the staging directory, then SIGKILL) ends the job: the launcher exits with
// the dead rank's status within the collective timeout, naming it, and every rank is
// gone. The checkpoint last.pt is still the previous save, file for file, and it
// resumes from that save's step; the staging directory and the dead rank's temporary
// file are gone; and a staging directory, even a complete one, is refused by --resume.
// Rank 1 is a writer like any other; rank 0 also publishes.
func TestLaunchFSDPCkptKillDuringSave(t *testing.T) {
	for _, victim := range []int{1, 0} {
		t.Run(fmt.Sprintf("rank %d killed", victim), func(t *testing.T) { ckptKill(t, victim) })
	}
}

// ckptKillTimeout is the collective timeout of the killed launch (--dist-timeout).
const ckptKillTimeout = 5 * time.Second

func ckptKill(t *testing.T, victim int) {
	runs := t.TempDir()
	ckpts := filepath.Join(runs, "cut", "checkpoints")
	require.NoError(t, os.MkdirAll(ckpts, 0o755))
	w := newDirWatch(t)
	require.NoError(t, w.add(ckpts))
	l := startLaunch(t, nil, append([]string{"--nproc-per-node", "2", "--fsdp", "--runs-dir", runs, "--experiment", "cut",
		"--epochs", "2", "--save-every", "1", "--dist-timeout", ckptKillTimeout.String()}, launchArgs...)...)
	require.Len(t, l.pids, 2)
	pid := l.pids[victim]
	last := filepath.Join(ckpts, "last.pt")
	staging := filepath.Join(ckpts, ".last.pt.sharded-staging")
	marker := fmt.Sprintf(".tmp-%d-", pid) // the victim's temporary files (fsutil's naming)

	// caught stops the victim if its temporary file name in the staging directory is
	// still being written and a previous save is complete; otherwise it lets it go on.
	caught := func(name string) bool {
		if !strings.Contains(name, marker) {
			return false
		}
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		_, errTmp := os.Stat(filepath.Join(staging, name))
		_, errLast := os.Stat(filepath.Join(last, "metadata.pt"))
		if errTmp != nil || errLast != nil {
			// That write ended before the victim stopped, or it is the first save.
			require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
			return false
		}
		return true
	}
	var tmp string
	giveUp := time.After(3 * time.Minute)
	for tmp == "" {
		select {
		case ev := <-w.events:
			switch {
			case ev == staging:
				// A save begins: watch its staging directory, and look at what it may
				// already hold.
				if w.add(staging) != nil {
					continue // already published
				}
				entries, _ := os.ReadDir(staging)
				for _, e := range entries {
					if tmp == "" && caught(e.Name()) {
						tmp = e.Name()
					}
				}
			case filepath.Dir(ev) == staging && caught(filepath.Base(ev)):
				tmp = filepath.Base(ev)
			}
		case <-giveUp:
			t.Fatalf("rank %d was never seen writing a sharded save after a complete one:\n%s", victim, l.output())
		}
	}
	// The victim is stopped with its file half-written: last.pt is the previous save,
	// which nothing touches until every rank has written the next one.
	want := readDirFiles(t, last)
	meta, err := checkpoint.Read(filepath.Join(last, "metadata.pt"))
	require.NoError(t, err)
	step, err := checkpoint.GetInt(meta, "global_step")
	require.NoError(t, err)
	require.Positive(t, step)

	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	status := l.end(time.Now().Add(ckptKillTimeout + stopDeadline))
	out := l.output()
	assert.Equal(t, 128+int(syscall.SIGKILL), status, "rank %d killed writing %s, after the save of step %d:\n%s", victim, tmp, step, out)
	assert.Contains(t, out, fmt.Sprintf("rank %d was killed by signal 9 (killed); the other ranks were stopped", victim))
	assert.NotContains(t, out, "did not stop within", "the surviving rank fails its collective and exits by itself")

	// Nothing of the unfinished save is left, and last.pt is the previous save.
	noTemporaryFiles(t, runs)
	left, err := filepath.Glob(filepath.Join(ckpts, ".*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no staging or previous directory is left:\n%s", out)
	assert.Equal(t, want, readDirFiles(t, last), "last.pt is the previous save, file for file")

	// A staging directory never loads, even a complete one.
	fake := filepath.Join(t.TempDir(), "checkpoints", ".last.pt.sharded-staging")
	require.NoError(t, os.CopyFS(fake, os.DirFS(last)))
	var cfg Config
	_, err = trainer.ReadRunConfig(fake, &cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is the staging directory of an unfinished sharded save, which is never loaded")
	b, err := child("--nproc-per-node", "2", "--resume", fake).CombinedOutput()
	require.Error(t, err, string(b))
	assert.Contains(t, string(b), "--resume: "+fake+" is the staging directory of an unfinished sharded save")
	assert.NotContains(t, string(b), "launched", "refused before any rank starts")

	// last.pt resumes from its step: one more step on two ranks.
	b, err = child("--nproc-per-node", "2", "--resume", last, "--max-steps", strconv.FormatInt(step+1, 10)).CombinedOutput()
	require.NoError(t, err, string(b))
	assert.Regexp(t, regexp.MustCompile(`resumed from `+regexp.QuoteMeta(last)+`: epoch \d+, batch \d+, global step `+strconv.FormatInt(step, 10)+`,`), string(b))
	meta, err = checkpoint.Read(filepath.Join(last, "metadata.pt"))
	require.NoError(t, err)
	after, err := checkpoint.GetInt(meta, "global_step")
	require.NoError(t, err)
	assert.Equal(t, step+1, after, "the resumed run trained one step and saved")
}

// readDirFiles returns the contents of the files in dir by name; dir holds some.
func readDirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := testsupport.DirFiles(t, dir)
	require.NotEmpty(t, out)
	return out
}

// dirWatch reports the paths of files and directories created in the directories it
// watches (inotify), from when each is added; a directory may be added while it is
// written into, and may be gone already.
type dirWatch struct {
	fd     int
	mu     sync.Mutex
	dirs   map[int32]string
	events chan string
}

func newDirWatch(t *testing.T) *dirWatch {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	require.NoError(t, err)
	w := &dirWatch{fd: fd, dirs: map[int32]string{}, events: make(chan string, 1<<14)}
	f := os.NewFile(uintptr(fd), "inotify")
	done := make(chan struct{})
	t.Cleanup(func() { close(done); f.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+syscall.SizeofInotifyEvent <= n; {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := string(bytes.TrimRight(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+int(ev.Len)], "\x00"))
				off += syscall.SizeofInotifyEvent + int(ev.Len)
				w.mu.Lock()
				dir, ok := w.dirs[ev.Wd]
				w.mu.Unlock()
				if !ok || name == "" || ev.Mask&syscall.IN_CREATE == 0 {
					continue
				}
				select {
				case w.events <- filepath.Join(dir, name):
				case <-done:
					return
				}
			}
		}
	}()
	return w
}

// add watches dir for creations.
func (w *dirWatch) add(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, err := syscall.InotifyAddWatch(w.fd, dir, syscall.IN_CREATE|syscall.IN_ONLYDIR)
	if err != nil {
		return err
	}
	w.dirs[int32(wd)] = dir
	return nil
}
