package main

// Multi-process training, torchrun's way: `train --nproc-per-node N ...` is a thin
// launcher (torchrun --standalone) that starts N copies of this binary with RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set; a copy
// started that way (or by torchrun --no-python, or a PyTorchJob) joins the process group
// and trains one rank of data-parallel training.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/torch"
	"github.com/gotrain/gotrain/torch/distributed"
)

// launch starts n local ranks running this binary with args and waits for them. It
// returns the first failure.
func launch(n, port int, args []string) error {
	if distributed.Launched() {
		return errors.New("--nproc-per-node: this process was already started by a launcher (WORLD_SIZE is set); drop the flag under torchrun")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if port == 0 {
		if port, err = freePort(); err != nil {
			return fmt.Errorf("--nproc-per-node: choosing a rendezvous port: %w", err)
		}
	} else if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
		return fmt.Errorf("--master-port %d: rank 0 could not host the rendezvous store on 127.0.0.1:%d (port in use?): %w", port, port, err)
	} else {
		l.Close()
	}
	fmt.Printf("train: launching %d ranks on this node (rendezvous 127.0.0.1:%d)\n", n, port)
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n),
			"GROUP_RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		if os.Getenv("OMP_NUM_THREADS") == "" {
			// torchrun's default with several processes per node: no oversubscription.
			cmd.Env = append(cmd.Env, "OMP_NUM_THREADS=1")
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting rank %d: %w", r, err)
		}
		cmds[r] = cmd
	}
	// The ranks are in this process group, so a terminal's SIGINT reaches them too; a
	// SIGINT or SIGTERM sent to the launcher alone is passed on. Either way the launcher
	// waits for the ranks, which agree on the step to stop at and let rank 0 save.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			for _, c := range cmds {
				c.Process.Signal(s)
			}
		}
	}()
	type exit struct {
		rank int
		err  error
	}
	exits := make(chan exit, n)
	for r, c := range cmds {
		go func() { exits <- exit{r, c.Wait()} }()
	}
	// As torchrun does, a failed rank ends the others: they normally fail on their own
	// (a collective with a lost peer is an error) and say why; after a grace period they
	// get SIGTERM, then SIGKILL.
	var first error
	code := 0
	var grace <-chan time.Time
	signalled := 0
	for left := n; left > 0; {
		select {
		case e := <-exits:
			left--
			if e.err == nil {
				continue
			}
			var ee *exec.ExitError
			if errors.As(e.err, &ee) && code == 0 {
				code = ee.ExitCode()
			}
			if first == nil {
				first = fmt.Errorf("rank %d: %w", e.rank, e.err)
				// An interrupted rank (exit 130) stopped where the others stop, and rank 0
				// may still be writing last.pt: no deadline for them.
				if !errors.As(e.err, &ee) || ee.ExitCode() != 130 {
					grace = time.After(launchGrace)
				}
			}
		case <-grace:
			s := []os.Signal{syscall.SIGTERM, os.Kill}[min(signalled, 1)]
			signalled++
			for _, c := range cmds {
				c.Process.Signal(s)
			}
			grace = time.After(5 * time.Second)
		}
	}
	if first != nil {
		return &launchError{err: first, code: code}
	}
	return nil
}

// launchGrace is how long the other ranks get to fail on their own after one failed.
const launchGrace = 10 * time.Second

// launchError carries a failed rank's exit status to the launcher's.
type launchError struct {
	err  error
	code int
}

func (e *launchError) Error() string { return e.err.Error() }

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
// returns nil for a single process.
// backend "auto" keeps GOTRAIN_DIST_BACKEND's choice, or lets Init choose.
func joinProcessGroup(backend string, timeout time.Duration) (*distributed.ProcessGroup, error) {
	if !distributed.Launched() {
		return nil, nil
	}
	o, err := distributed.EnvOptions()
	if err != nil {
		return nil, err
	}
	o.Timeout = timeout
	if backend != "auto" {
		o.Backend = backend
	}
	pg, err := distributed.Init(o)
	if err != nil {
		return nil, err
	}
	if pg.IsMain() {
		fmt.Printf("distributed: %d ranks (%s), rendezvous %s:%d, timeout %s\n", o.WorldSize, pg.Backend(), o.MasterAddr, o.MasterPort, timeout)
	}
	return pg, nil
}

// rankDevice is the device flag for one rank: torchrun's convention, cuda:LOCAL_RANK,
// unless the run is on the CPU.
func rankDevice(dev string, pg *distributed.ProcessGroup) string {
	if pg == nil || dev == "cpu" || !torch.CUDAIsAvailable() {
		return dev
	}
	return pg.Device().String()
}
