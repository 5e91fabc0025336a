package main

// Multi-process training, torchrun's way: `train --nproc-per-node N ...` is a thin
// launcher (torchrun --standalone) that starts N copies of this binary with RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; a copy
// started that way (or by torchrun --no-python, or a PyTorchJob) joins the process group
// and trains one rank of data-parallel training.
//
// The launcher behaves as torchrun's elastic agent does when a job cannot go on:
//   - ranks that would train on CUDA need a GPU each: with fewer visible GPUs than
//     ranks it refuses before starting any (and a rank started by another launcher
//     whose LOCAL_RANK has no GPU fails at start, before the rendezvous);
//   - each rank runs in its own process group, so that a stop reaches everything the
//     rank started, and dies with the launcher (Linux: the parent-death signal);
//   - SIGINT, SIGTERM or SIGHUP to the launcher, at any moment, is passed on to every
//     rank (SIGHUP as SIGTERM): the ranks agree on a step to stop at, rank 0 writes
//     last.pt, and they exit. A rank still running stopGrace later (stuck in a
//     rendezvous, a collective or a long write) is killed, and the temporary files of
//     a killed writer are removed, so no half-written checkpoint is left: checkpoints
//     are written to a temporary name and renamed into place (a sharded one, every
//     rank's files, to a staging directory, removed when a rank was killed). A second signal kills
//     at once. The launcher then exits with status 130 — for SIGTERM too, the status
//     of an interrupted run, as cmd/train's own — and prints the command that resumes
//     when last.pt was written;
//   - when a rank fails (exits with a status other than 0 or 130, or dies of a
//     signal), the launcher reports "rank K exited with status S", stops the others the
//     same way, and exits with that status.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/distributed"
)

// stopGraceEnv names the environment variable that sets stopGrace (a Go duration):
// raise it when rank 0's checkpoint takes longer than that to write.
const stopGraceEnv = "GOTRAIN_STOP_GRACE"

// defaultStopGrace is how long ranks have to stop after a signal or another rank's
// failure before they are killed: with the kill and the reaping, every rank is gone
// within 10 s of the signal.
const defaultStopGrace = 5 * time.Second

// statusInterrupted is the exit status of an interrupted run, the shell's for SIGINT.
const statusInterrupted = 130

// cudaDevices reports how many GPUs this process sees (tests replace it, so that a
// machine without one can pretend to have some).
var cudaDevices = func() int {
	if !torch.CUDAIsAvailable() {
		return 0
	}
	return torch.CUDADeviceCount()
}

// beforeRendezvous, when set, runs in a rank just before it joins the process group (a
// hook for tests: a rank that arrives late, or never).
var beforeRendezvous func(rank int)

// launchPlan is what the launcher knows of the run it starts.
type launchPlan struct {
	n, port int
	// args are the ranks' arguments: the command line without the launcher's flags.
	args []string
	// config is the run's resolved configuration (flags over a config file or a
	// checkpoint's), runDir rank 0's run directory ("" until chosen).
	config  Config
	runDir  string
	backend string // --dist-backend
}

// needsGPUs reports whether the ranks of a run on device with backend each train on a
// GPU of their own (cuda:LOCAL_RANK): device cuda (any index: each rank takes its
// own), NCCL, or the automatic choice on a machine with GPUs.
func needsGPUs(device, backend string) bool {
	switch {
	case device == "cpu":
		return false
	case strings.HasPrefix(device, "cuda") || strings.EqualFold(backend, distributed.NCCL):
		return true
	case device == "" || device == "auto":
		return cudaDevices() > 0
	}
	return false
}

// gpuAdvice follows a GPUShortageError with what the user can do.
func gpuAdvice(err error, flag string, visible int) error {
	fewer := "run fewer ranks per node"
	if visible > 0 {
		fewer = fmt.Sprintf("run at most %d rank(s) per node (%s %d)", visible, flag, visible)
	}
	return fmt.Errorf("%w: %s, make more GPUs visible, or train on the CPU with --device cpu", err, fewer)
}

// launch starts p.n local ranks running this binary and waits for them (see the top of
// this file). Its error is a *launchError carrying the status to exit with.
func launch(p launchPlan) error {
	if distributed.Launched() {
		return errors.New("--nproc-per-node: this process was already started by a launcher (WORLD_SIZE is set); drop the flag under torchrun")
	}
	switch strings.ToLower(p.backend) {
	case "auto", distributed.Gloo, distributed.NCCL:
	default:
		return fmt.Errorf("--dist-backend: backend %q is not gloo, nccl, or auto", p.backend)
	}
	if needsGPUs(p.config.Device, p.backend) {
		visible := cudaDevices()
		if err := distributed.CheckGPUs(p.n, visible); err != nil {
			return gpuAdvice(fmt.Errorf("--nproc-per-node %d: %w", p.n, err), "--nproc-per-node", visible)
		}
	}
	grace, err := stopGrace()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	port := p.port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return fmt.Errorf("--nproc-per-node: choosing a rendezvous port: %w", err)
		}
	} else if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
		return fmt.Errorf("--master-port %d: rank 0 could not host the rendezvous store on 127.0.0.1:%d (port in use?): %w", port, port, err)
	} else {
		l.Close()
	}
	// Every rank must write to the same run directory: name it here when the run has
	// no experiment name yet (it would be the time each rank started).
	args, runDir := p.args, p.runDir
	if runDir == "" {
		c := p.config
		generated := c.Experiment == ""
		runDir = c.runDir()
		if generated {
			args = append(append([]string(nil), args...), "--experiment", c.Experiment)
		}
	}

	// Signals are caught before the first rank starts, so none can end the launcher
	// and leave ranks behind.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// The parent-death signal is tied to the thread that started the child: keep it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	began := time.Now()
	j := &job{grace: grace, runDir: runDir}
	for r := range p.n {
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(p.n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(p.n),
			"GROUP_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		if os.Getenv("OMP_NUM_THREADS") == "" {
			// torchrun's default with several processes per node: no oversubscription.
			cmd.Env = append(cmd.Env, "OMP_NUM_THREADS=1")
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
		cmd.SysProcAttr = rankProcAttr()
		if err := cmd.Start(); err != nil {
			j.stop(syscall.SIGKILL)
			j.wait(nil)
			return fmt.Errorf("starting rank %d: %w", r, err)
		}
		j.ranks = append(j.ranks, &rank{id: r, cmd: cmd})
	}
	pids := make([]string, len(j.ranks))
	for i, r := range j.ranks {
		pids[i] = strconv.Itoa(r.cmd.Process.Pid)
	}
	fmt.Printf("train: launched %d ranks on this node (rendezvous 127.0.0.1:%d, pids %s)\n", p.n, port, strings.Join(pids, " "))
	j.wait(sigs)
	return j.result(p.n, began)
}

// stopGrace reads GOTRAIN_STOP_GRACE.
func stopGrace() (time.Duration, error) {
	s := os.Getenv(stopGraceEnv)
	if s == "" {
		return defaultStopGrace, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q is not a positive duration (like 5s)", stopGraceEnv, s)
	}
	return d, nil
}

// rank is one started rank.
type rank struct {
	id     int
	cmd    *exec.Cmd
	done   bool
	err    error // from Wait
	killed bool  // the launcher sent it SIGKILL
}

// job is the launcher's view of its ranks while it waits for them.
type job struct {
	ranks  []*rank
	grace  time.Duration
	runDir string

	signal  os.Signal // the first signal the launcher got, if any
	failed  *rank     // the first rank that failed, if any
	stopped bool      // the ranks were told to stop
	killAt  *time.Timer
}

// stop sends s to every rank still running, SIGKILL to their whole process groups.
func (j *job) stop(s syscall.Signal) {
	for _, r := range j.ranks {
		if r.done {
			continue
		}
		if s == syscall.SIGKILL {
			r.killed = true
		}
		signalRank(r.cmd.Process, s)
	}
}

// stopAll tells the ranks to stop with s and arms the kill after the grace period.
func (j *job) stopAll(s syscall.Signal) {
	if j.stopped {
		return
	}
	j.stopped = true
	j.stop(s)
	j.killAt = time.NewTimer(j.grace)
}

// wait waits for every rank, handling signals (sigs may be nil) and failures.
func (j *job) wait(sigs <-chan os.Signal) {
	type exit struct {
		r   *rank
		err error
	}
	exits := make(chan exit, len(j.ranks))
	for _, r := range j.ranks {
		go func() { exits <- exit{r, r.cmd.Wait()} }()
	}
	for left := len(j.ranks); left > 0; {
		var kill <-chan time.Time
		if j.killAt != nil {
			kill = j.killAt.C
		}
		select {
		case e := <-exits:
			left--
			e.r.done, e.r.err = true, e.err
			if e.err == nil {
				continue
			}
			switch status := exitStatus(e.err); {
			case status == statusInterrupted && j.failed == nil:
				// A rank was interrupted (a signal sent to it directly, or the
				// launcher's): the others stop at the same step. Bound their stop.
				j.stopAll(syscall.SIGTERM)
			case j.signal == nil && j.failed == nil && !e.r.killed:
				j.failed = e.r
				fmt.Fprintf(os.Stderr, "train: rank %d %s; stopping the other ranks\n", e.r.id, describeExit(e.err))
				j.stopAll(syscall.SIGTERM)
			}
		case s := <-sigs:
			if j.signal != nil {
				fmt.Fprintf(os.Stderr, "train: second signal (%v): killing the ranks\n", s)
				j.stop(syscall.SIGKILL)
				continue
			}
			j.signal = s
			fwd := syscall.SIGTERM
			if s == syscall.SIGINT {
				fwd = syscall.SIGINT
			}
			fmt.Fprintf(os.Stderr, "train: %v: stopping the ranks (rank 0 saves last.pt; killed after %v; a second signal kills now)\n", s, j.grace)
			j.stopped = false // a signal after a failure still gets its own grace
			if j.killAt != nil {
				j.killAt.Stop()
			}
			j.stopAll(fwd)
		case <-kill:
			var slow []string
			for _, r := range j.ranks {
				if !r.done {
					slow = append(slow, strconv.Itoa(r.id))
				}
			}
			if len(slow) > 0 {
				fmt.Fprintf(os.Stderr, "train: rank(s) %s did not stop within %v: killing them\n", strings.Join(slow, ", "), j.grace)
			}
			j.stop(syscall.SIGKILL)
			j.killAt = nil
		}
	}
	if j.killAt != nil {
		j.killAt.Stop()
	}
	j.removeKilledTemps()
}

// removeKilledTemps deletes the temporary files that killed ranks (by the launcher or
// by a signal from elsewhere) were writing in the run directory (checkpoint.Write names
// them .NAME.tmp-PID-*): the checkpoint they were replacing is still whole, and nothing
// else refers to them. A sharded save's staging directory (checkpoints/.NAME.sharded-
// staging, which every rank writes into) is removed too when a rank was killed: with
// every rank gone that save can never be published, and a staging directory never loads.
func (j *job) removeKilledTemps() {
	if j.runDir == "" {
		return
	}
	ckpts := filepath.Join(j.runDir, "checkpoints")
	for _, r := range j.ranks {
		if !r.killed && !diedOfSignal(r.err) {
			continue
		}
		for _, dir := range []string{j.runDir, ckpts} {
			matches, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-"+strconv.Itoa(r.cmd.Process.Pid)+"-*"))
			for _, m := range matches {
				if err := os.Remove(m); err == nil {
					fmt.Fprintf(os.Stderr, "train: removed %s, which killed rank %d was writing\n", m, r.id)
				}
			}
		}
		staging, _ := filepath.Glob(filepath.Join(ckpts, ".*.sharded-staging"))
		for _, m := range staging {
			if err := os.RemoveAll(m); err == nil {
				fmt.Fprintf(os.Stderr, "train: removed %s, the unfinished sharded checkpoint that killed rank %d was writing with the others\n", m, r.id)
			}
		}
	}
}

// cause is the rank whose failure ended the job: the first to fail, unless that one
// exited with an error and another died of a signal the launcher did not send (SIGKILL
// from elsewhere, a crash). A rank that dies mid-collective makes its peers fail with
// "lost rank N" at once, and their exit can reach the launcher first.
func (j *job) cause() *rank {
	if j.failed == nil || diedOfSignal(j.failed.err) {
		return j.failed
	}
	for _, r := range j.ranks {
		if !r.killed && diedOfSignal(r.err) {
			if s := exitSignal(r.err); s != syscall.SIGTERM && s != syscall.SIGINT {
				return r
			}
		}
	}
	return j.failed
}

// exitSignal is the signal a rank died of (diedOfSignal), or 0.
func exitSignal(err error) syscall.Signal {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// diedOfSignal reports whether a rank's Wait error is its death by a signal.
func diedOfSignal(err error) bool { return exitSignal(err) != 0 }

// result is the launcher's outcome once every rank has exited.
func (j *job) result(n int, began time.Time) error {
	var killed []string
	for _, r := range j.ranks {
		if r.killed && r.err != nil {
			killed = append(killed, strconv.Itoa(r.id))
		}
	}
	note := ""
	if len(killed) > 0 {
		note = fmt.Sprintf(" (rank(s) %s killed)", strings.Join(killed, ", "))
	}
	last := filepath.Join(j.runDir, "checkpoints", "last.pt")
	resume := ""
	if fi, err := os.Stat(last); err == nil && j.runDir != "" {
		resume = fmt.Sprintf("go run ./cmd/train --nproc-per-node %d --resume %s", n, last)
		if fi.ModTime().Before(began) {
			resume = "(last.pt is from before this run) " + resume
		}
	}
	switch failed := j.cause(); {
	case failed != nil:
		msg := fmt.Sprintf("rank %d %s; the other ranks were stopped%s", failed.id, describeExit(failed.err), note)
		if resume != "" {
			msg += "; the last checkpoint resumes with: " + resume
		}
		return &launchError{err: errors.New(msg), code: max(exitStatus(failed.err), 1)}
	case j.signal != nil || j.stopped:
		cause := "a rank was interrupted"
		if j.signal != nil {
			cause = fmt.Sprintf("interrupted (%v)", j.signal)
		}
		msg := fmt.Sprintf("%s: all %d ranks stopped%s", cause, n, note)
		if fi, err := os.Stat(last); err == nil && !fi.ModTime().Before(began) {
			msg += fmt.Sprintf("; state saved to %s; resume with: go run ./cmd/train --nproc-per-node %d --resume %s", last, n, last)
		} else {
			msg += "; no checkpoint was written in this run"
		}
		return &launchError{err: errors.New(msg), code: statusInterrupted}
	}
	for _, r := range j.ranks {
		if r.err != nil { // cannot happen: a failure or an interrupt is recorded above
			return &launchError{err: fmt.Errorf("rank %d %s", r.id, describeExit(r.err)), code: max(exitStatus(r.err), 1)}
		}
	}
	return nil
}

// exitStatus is a process' exit status, 128+N for death by signal N (as a shell
// reports it), 1 for anything else.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// describeExit says how a rank ended: "exited with status 3", "was killed by signal
// killed".
func describeExit(err error) string {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return "failed: " + err.Error()
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ee.ExitCode())
}

// launchError carries the status the launcher (or a rank interrupted before it could
// train) exits with.
type launchError struct {
	err  error
	code int
}

func (e *launchError) Error() string { return e.err.Error() }

func (e *launchError) Unwrap() error { return e.err }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stripLaunchFlags removes the launcher's own flags from the arguments the ranks get.
func stripLaunchFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := strings.TrimLeft(a, "-")
		if a == name {
			out = append(out, a)
			continue
		}
		name, _, hasValue := strings.Cut(name, "=")
		if name == "nproc-per-node" || name == "master-port" {
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

// joinProcessGroup joins the process group when a launcher started this process; it
// returns nil for a single process. backend "auto" keeps GOTRAIN_DIST_BACKEND's choice,
// or lets Init choose; rdzvTimeout 0 keeps GOTRAIN_RDZV_TIMEOUT's, or the default.
// A rank whose LOCAL_RANK has no GPU fails here, before the rendezvous; a signal during
// the rendezvous ends the rank at once with status 130 (nothing was written yet).
func joinProcessGroup(ctx context.Context, device, backend string, timeout, rdzvTimeout time.Duration) (*distributed.ProcessGroup, error) {
	if !distributed.Launched() {
		return nil, nil
	}
	o, err := distributed.EnvOptions()
	if err != nil {
		return nil, err
	}
	o.Timeout = timeout
	if rdzvTimeout > 0 {
		o.RendezvousTimeout = rdzvTimeout
	}
	if o.RendezvousTimeout <= 0 {
		o.RendezvousTimeout = distributed.DefaultRendezvousTimeout
	}
	if backend != "auto" {
		o.Backend = backend
	}
	if needsGPUs(device, o.Backend) {
		visible := cudaDevices()
		if err := distributed.CheckRankGPU(o, visible); err != nil {
			return nil, gpuAdvice(err, "torchrun --nproc-per-node", visible)
		}
	}
	interrupted := func() error {
		return &launchError{code: statusInterrupted,
			err: fmt.Errorf("rank %d: interrupted (%v) during the rendezvous; nothing was written", o.Rank, context.Cause(ctx))}
	}
	if ctx.Err() != nil {
		return nil, interrupted()
	}
	if beforeRendezvous != nil {
		beforeRendezvous(o.Rank)
	}
	if o.Rank == 0 {
		fmt.Printf("distributed: rank 0 waiting for %d ranks at %s:%d (rendezvous timeout %s)\n", o.WorldSize, o.MasterAddr, o.MasterPort, o.RendezvousTimeout)
	}
	// The rendezvous blocks in libtorch; a signal must not wait for it.
	type joined struct {
		pg  *distributed.ProcessGroup
		err error
	}
	done := make(chan joined, 1)
	go func() {
		pg, err := distributed.Init(o)
		done <- joined{pg, err}
	}()
	var j joined
	select {
	case j = <-done:
	case <-ctx.Done():
		return nil, interrupted()
	}
	if j.err != nil {
		return nil, j.err
	}
	if j.pg.IsMain() {
		fmt.Printf("distributed: %d ranks (%s), rendezvous %s:%d, collective timeout %s\n", o.WorldSize, j.pg.Backend(), o.MasterAddr, o.MasterPort, timeout)
	}
	return j.pg, nil
}

// rankDevice is the device flag for one rank: torchrun's convention, cuda:LOCAL_RANK,
// unless the run is on the CPU.
func rankDevice(dev string, pg *distributed.ProcessGroup) string {
	if pg == nil || dev == "cpu" || !torch.CUDAIsAvailable() {
		return dev
	}
	return pg.Device().String()
}
