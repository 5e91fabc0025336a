// Package distributed is torch.distributed for gotrain: a c10d process group over a
// TCPStore rendezvous, joined from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT) or from explicit Options, with the collectives data-parallel
// training needs (broadcast, all-reduce and barrier over tensor lists) and those that
// sharded training needs (all-gather and reduce-scatter into flat buffers).
//
// The backend is Gloo or NCCL, as with torch.distributed: Gloo handles CPU tensors
// and, in CUDA builds, CUDA tensors through host staging; NCCL (CUDA builds with NCCL's
// headers, see NCCLAvailable) runs the collectives on the GPUs. Backend "" picks NCCL
// when this rank trains on a GPU and the build has it, else Gloo. Every Gloo collective
// is bounded by Options.Timeout, so a dead or stuck peer becomes an error (naming the
// lost rank when the store can tell) rather than a hang; under NCCL the host waits for
// each collective with the same timeout, and NCCL's watchdog, set a little above it
// with TORCH_NCCL_ASYNC_ERROR_HANDLING=1 unless the environment chose otherwise, ends
// the process if work outlives it.
//
// The rendezvous has its own, shorter bound (Options.RendezvousTimeout): every rank
// posts its arrival to the store, and when the bound passes the error names the ranks
// that never arrived, as torchrun's rendezvous does.
//
// The same program runs under torchrun --no-python, a Kubernetes PyTorchJob, or
// cmd/train --nproc-per-node:
//
//	if distributed.Launched() {
//		opts, err := distributed.EnvOptions()
//		...
//		pg, err := distributed.Init(opts)
//		...
//		defer pg.Close()
//	}
package distributed

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gotrain/gotrain/torch"
)

// DefaultTimeout bounds each collective when Options.Timeout is 0: torch.distributed's
// Gloo default.
const DefaultTimeout = 30 * time.Minute

// DefaultRendezvousTimeout bounds the rendezvous and the process group's start-up when
// Options.RendezvousTimeout is 0: long enough for ranks that start at different moments
// (containers pulling images, nodes booting), short enough that a rank that never comes
// is reported within minutes rather than at the collective timeout.
const DefaultRendezvousTimeout = 5 * time.Minute

// RendezvousTimeoutEnv names the environment variable that sets
// Options.RendezvousTimeout in EnvOptions: a Go duration ("90s", "5m") or seconds.
const RendezvousTimeoutEnv = "GOTRAIN_RDZV_TIMEOUT"

// DefaultBucketBytes is the gradient bucket size of AllReduceGradients, DDP's 25 MB.
const DefaultBucketBytes = 25 << 20

// ErrUnavailable is returned by Init in a build without c10d (build tag nodist).
var ErrUnavailable = errors.New("distributed: gotrain was built without distributed support (tag nodist); install libgloo-dev (scripts/setup.sh) and rebuild without -tags nodist")

// Options says which process group to join.
type Options struct {
	// Rank is this process' rank in [0, WorldSize); WorldSize the number of processes.
	Rank, WorldSize int
	// LocalRank is the rank on this node; on CUDA it picks the device cuda:LocalRank.
	LocalRank int
	// LocalWorldSize is the number of processes on this node (0: unknown).
	LocalWorldSize int
	// MasterAddr and MasterPort locate the TCPStore that rank 0 hosts.
	MasterAddr string
	MasterPort int
	// Timeout bounds every collective (0: DefaultTimeout).
	Timeout time.Duration
	// RendezvousTimeout bounds the rendezvous (every rank reaching the store and posting
	// its arrival) and the process group's start-up (0: DefaultRendezvousTimeout).
	// EnvOptions reads it from GOTRAIN_RDZV_TIMEOUT.
	RendezvousTimeout time.Duration
	// AgentStore reports that a launcher's agent already serves the store at
	// MasterAddr:MasterPort (torchrun sets TORCHELASTIC_USE_AGENT_STORE=True), so rank 0
	// connects to it instead of hosting one.
	AgentStore bool
	// Attempt is the launcher's restart count (TORCHELASTIC_RESTART_COUNT): each attempt
	// meets under its own keys, so a restarted job never sees an earlier one's arrivals.
	Attempt int
	// Backend is "gloo", "nccl", or "" to choose: NCCL when CUDA is available and the
	// build has NCCL, else Gloo. EnvOptions reads it from GOTRAIN_DIST_BACKEND.
	Backend string
}

// The process group backends.
const (
	Gloo = "gloo"
	NCCL = "nccl"
)

// NCCLAvailable reports whether this build can make NCCL process groups, and if not,
// why (a build with -tags cpu, or one made without NCCL's and CUDA's headers).
func NCCLAvailable() (bool, string) { return torch.NCCLAvailable() }

// backend resolves Options.Backend.
func (o Options) backend() (string, error) {
	switch strings.ToLower(o.Backend) {
	case "", "auto":
		if ok, _ := NCCLAvailable(); ok && torch.CUDAIsAvailable() && o.LocalRank < torch.CUDADeviceCount() {
			return NCCL, nil
		}
		return Gloo, nil
	case Gloo:
		return Gloo, nil
	case NCCL:
		if ok, why := NCCLAvailable(); !ok {
			return "", errors.New(why)
		}
		if n := torch.CUDADeviceCount(); o.LocalRank >= n {
			return "", fmt.Errorf("the NCCL backend needs a GPU for local rank %d, and %d are visible", o.LocalRank, n)
		}
		return NCCL, nil
	}
	return "", fmt.Errorf("unknown backend %q (want gloo, nccl, or empty to choose)", o.Backend)
}

// Launched reports whether the process was started by a launcher (torchrun,
// cmd/train --nproc-per-node, a PyTorchJob): WORLD_SIZE is set in the environment.
func Launched() bool { return os.Getenv("WORLD_SIZE") != "" }

// EnvOptions reads torchrun's environment contract. A missing or malformed variable,
// or a rank outside the world, is an error that names it.
func EnvOptions() (Options, error) {
	var o Options
	var errs []error
	num := func(name string, required bool, lo int) int {
		s := os.Getenv(name)
		if s == "" {
			if required {
				errs = append(errs, fmt.Errorf("%s is not set", name))
			}
			return 0
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < lo {
			errs = append(errs, fmt.Errorf("%s=%q is not an integer >= %d", name, s, lo))
		}
		return v
	}
	o.WorldSize = num("WORLD_SIZE", true, 1)
	o.Rank = num("RANK", true, 0)
	o.LocalRank = num("LOCAL_RANK", false, 0)
	o.LocalWorldSize = num("LOCAL_WORLD_SIZE", false, 1)
	o.MasterAddr = os.Getenv("MASTER_ADDR")
	if o.MasterAddr == "" {
		errs = append(errs, errors.New("MASTER_ADDR is not set"))
	}
	o.MasterPort = num("MASTER_PORT", true, 1)
	o.Backend = os.Getenv("GOTRAIN_DIST_BACKEND")
	o.Attempt = num("TORCHELASTIC_RESTART_COUNT", false, 0)
	// torchrun's agent serves the store at the MASTER_ADDR:MASTER_PORT it exports.
	o.AgentStore = os.Getenv("TORCHELASTIC_USE_AGENT_STORE") == "True"
	if s := os.Getenv(RendezvousTimeoutEnv); s != "" {
		d, err := ParseTimeout(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", RendezvousTimeoutEnv, s, err))
		}
		o.RendezvousTimeout = d
	}
	if len(errs) == 0 {
		errs = append(errs, o.validate())
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("distributed: bad launch environment (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT): %w", err)
	}
	return o, nil
}

func (o Options) validate() error {
	switch {
	case o.WorldSize < 1:
		return fmt.Errorf("world size %d is not >= 1", o.WorldSize)
	case o.Rank < 0 || o.Rank >= o.WorldSize:
		return fmt.Errorf("rank %d is not in [0, %d) (RANK must be below WORLD_SIZE)", o.Rank, o.WorldSize)
	case o.LocalRank < 0 || (o.LocalWorldSize > 0 && o.LocalRank >= o.LocalWorldSize):
		return fmt.Errorf("local rank %d is not in [0, %d)", o.LocalRank, o.LocalWorldSize)
	case o.MasterAddr == "":
		return errors.New("master address is empty")
	case o.MasterPort < 1 || o.MasterPort > 65535:
		return fmt.Errorf("master port %d is not in 1..65535", o.MasterPort)
	}
	switch strings.ToLower(o.Backend) {
	case "", "auto", Gloo, NCCL:
	default:
		return fmt.Errorf("backend %q is not gloo, nccl, or empty to choose", o.Backend)
	}
	return nil
}

// ParseTimeout reads a timeout as a Go duration ("90s", "5m") or a number of seconds
// (torchrun's unit); it must be positive.
func ParseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) || secs > math.MaxInt64/float64(time.Second) {
			return 0, fmt.Errorf("not a duration (90s, 5m) or a number of seconds")
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be > 0")
	}
	return d, nil
}

// GPUShortageError says that a node runs more ranks than it has visible GPUs: with
// CUDA every rank trains on its own GPU, cuda:LOCAL_RANK, as under torchrun.
type GPUShortageError struct {
	// Ranks is the number of ranks on the node (LOCAL_WORLD_SIZE, or LOCAL_RANK+1 when
	// that is unknown); Visible the number of GPUs this process sees.
	Ranks, Visible int
	// Rank and LocalRank name the rank that has no GPU; Rank is -1 for a launcher's
	// check before any rank started.
	Rank, LocalRank int
}

func (e *GPUShortageError) Error() string {
	var b strings.Builder
	if e.Rank >= 0 {
		fmt.Fprintf(&b, "rank %d (LOCAL_RANK %d) has no GPU: ", e.Rank, e.LocalRank)
	}
	verb := "GPUs are"
	if e.Visible == 1 {
		verb = "GPU is"
	}
	fmt.Fprintf(&b, "%d ranks on this node need one GPU each, but %d %s visible (%s)",
		e.Ranks, e.Visible, verb, visibleDevices())
	return b.String()
}

// visibleDevices describes CUDA_VISIBLE_DEVICES, which decides what "visible" means.
func visibleDevices() string {
	v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	if !ok {
		return "CUDA_VISIBLE_DEVICES is not set"
	}
	return fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q", v)
}

// CheckGPUs returns a *GPUShortageError when ranks ranks on one node would not have a
// GPU each among visible ones (a launcher's check, before it starts any rank).
func CheckGPUs(ranks, visible int) error {
	if ranks > visible {
		return &GPUShortageError{Ranks: ranks, Visible: visible, Rank: -1, LocalRank: -1}
	}
	return nil
}

// CheckRankGPU returns a *GPUShortageError when the rank o describes has no GPU among
// visible ones (a rank's check at start, before the rendezvous, so that the job fails
// at once instead of waiting for it).
func CheckRankGPU(o Options, visible int) error {
	if o.LocalRank < visible {
		return nil
	}
	ranks := max(o.LocalWorldSize, o.LocalRank+1)
	return &GPUShortageError{Ranks: ranks, Visible: visible, Rank: o.Rank, LocalRank: o.LocalRank}
}

// ProcessGroup is a joined c10d process group. Its collectives must be called by every
// rank in the same order, as torch.distributed's.
type ProcessGroup struct {
	c       *torch.Comm
	opts    Options
	backend string
}

// Init joins the process group: rank 0 hosts the TCPStore on MasterAddr:MasterPort (or
// the launcher's agent does, with AgentStore), every rank connects to it and posts its
// arrival, and all wait at most RendezvousTimeout for the others, then start the
// backend within what is left of it. A rendezvous that times out is an error naming the
// ranks that did not arrive.
func Init(o Options) (*ProcessGroup, error) {
	if !torch.DistAvailable() {
		return nil, ErrUnavailable
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("distributed: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.RendezvousTimeout <= 0 {
		o.RendezvousTimeout = DefaultRendezvousTimeout
	}
	backend, err := o.backend()
	if err != nil {
		return nil, fmt.Errorf("distributed: rank %d: %w", o.Rank, err)
	}
	cb := torch.Gloo
	if backend == NCCL {
		cb = torch.NCCL
		// NCCL makes its communicators on the current device: this rank's GPU.
		if err := torch.CUDASetDevice(o.LocalRank); err != nil {
			return nil, fmt.Errorf("distributed: rank %d: %w", o.Rank, err)
		}
	}
	prefix := ""
	if o.Attempt > 0 {
		prefix = fmt.Sprintf("attempt%d/", o.Attempt)
	}
	c, err := torch.NewComm(torch.CommOptions{Addr: o.MasterAddr, Port: o.MasterPort, Rank: o.Rank, World: o.WorldSize,
		Timeout: o.Timeout, RendezvousTimeout: o.RendezvousTimeout, Backend: cb, AgentStore: o.AgentStore, KeyPrefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("distributed: init rank %d of %d (%s): %w", o.Rank, o.WorldSize, backend, unwrapTorch(err))
	}
	return &ProcessGroup{c: c, opts: o, backend: backend}, nil
}

// Backend is the group's backend, "gloo" or "nccl".
func (pg *ProcessGroup) Backend() string { return pg.backend }

// Close leaves the process group (rank 0's store stops serving). Closing nil is a no-op.
func (pg *ProcessGroup) Close() {
	if pg != nil {
		pg.c.Close()
	}
}

// Rank is this process' rank; a nil group is a single process, rank 0.
func (pg *ProcessGroup) Rank() int {
	if pg == nil {
		return 0
	}
	return pg.opts.Rank
}

// WorldSize is the number of ranks; a nil group is a single process, 1.
func (pg *ProcessGroup) WorldSize() int {
	if pg == nil {
		return 1
	}
	return pg.opts.WorldSize
}

// LocalRank is the rank on this node.
func (pg *ProcessGroup) LocalRank() int { return pg.opts.LocalRank }

// IsMain reports whether this is rank 0 (or a single process), the one that writes files.
func (pg *ProcessGroup) IsMain() bool { return pg.Rank() == 0 }

// Options returns the options the group was joined with.
func (pg *ProcessGroup) Options() Options { return pg.opts }

// Device is the device this rank trains on: cuda:LocalRank when CUDA is available,
// else the CPU.
func (pg *ProcessGroup) Device() torch.Device {
	if torch.CUDAIsAvailable() {
		return torch.CUDA(pg.opts.LocalRank)
	}
	return torch.CPU
}

// checkOpen refuses a nil or closed group before any collective.
func (pg *ProcessGroup) checkOpen() error {
	if pg == nil || pg.c == nil {
		return errors.New("distributed: process group is closed")
	}
	return nil
}

// Broadcast copies root's tensors into every rank's tensors in place, coalesced into
// one flat buffer per dtype. The tensors must have the same shapes on every rank.
func (pg *ProcessGroup) Broadcast(ts []*torch.Tensor, root int) error {
	if err := pg.checkOpen(); err != nil || len(ts) == 0 {
		return err
	}
	return wrap(pg.c.Broadcast(ts, root))
}

// ReduceOp is the reduction of an all-reduce or a reduce-scatter.
type ReduceOp int

// The reduce operations. Avg is the sum divided by the world size, for floating-point
// tensors only: NCCL averages itself; Gloo, which has no average, sums and then
// divides.
const (
	Sum = ReduceOp(torch.ReduceSum)
	Max = ReduceOp(torch.ReduceMax)
	Min = ReduceOp(torch.ReduceMin)
	Avg = ReduceOp(torch.ReduceAvg)
)

var opNames = map[ReduceOp]string{Sum: "sum", Max: "max", Min: "min", Avg: "avg"}

func (op ReduceOp) String() string {
	if s, ok := opNames[op]; ok {
		return s
	}
	return fmt.Sprintf("ReduceOp(%d)", int(op))
}

// checkOp refuses an unknown op, and Avg on a tensor that is not floating-point.
func checkOp(op ReduceOp, ts []*torch.Tensor) error {
	if _, ok := opNames[op]; !ok {
		return fmt.Errorf("distributed: unknown reduce op %d (want Sum, Max, Min or Avg)", int(op))
	}
	for i, t := range ts {
		if op == Avg && t != nil && !t.DType().IsFloatingPoint() {
			return fmt.Errorf("distributed: reduce op avg needs floating-point tensors; tensor %d is %s", i, t.DType())
		}
	}
	return nil
}

// AllReduce reduces the tensors across ranks in place.
func (pg *ProcessGroup) AllReduce(ts []*torch.Tensor, op ReduceOp) error {
	if err := pg.checkOpen(); err != nil || len(ts) == 0 {
		return err
	}
	if err := checkOp(op, ts); err != nil {
		return err
	}
	return wrap(pg.c.AllReduce(ts, torch.ReduceOp(op)))
}

// AllGather gathers every rank's in into out, the flat buffer of a unit: out has
// WorldSize times in's elements (any shape: a parameter's full shape when in is its
// dim-0 shard) and receives every rank's in, flattened, in rank order, as
// torch.distributed.all_gather_into_tensor. in and out have the same dtype and device
// (CUDA under NCCL); sizes that do not match are an error naming them, returned before
// any communication. Every rank must pass the same sizes.
func (pg *ProcessGroup) AllGather(out, in *torch.Tensor) error {
	return pg.pairs("all-gather", []*torch.Tensor{out}, []*torch.Tensor{in}, false, nil)
}

// AllGatherCoalesced is AllGather for a list of (outs[i], ins[i]) pairs in one
// collective per dtype and device, as FSDP2 gathers a unit's parameters: the inputs are
// copied into one flat buffer, gathered, and copied out into the outputs (with one pair
// of a dtype, straight into its output).
func (pg *ProcessGroup) AllGatherCoalesced(outs, ins []*torch.Tensor) error {
	return pg.pairs("all-gather", outs, ins, true, nil)
}

// ReduceScatter reduces in across ranks with op and leaves this rank's chunk of the
// result in out, as torch.distributed.reduce_scatter_tensor: in has WorldSize times
// out's elements and splits, flattened, into WorldSize equal chunks; out receives chunk
// Rank (a parameter's dim-0 shard when in is its full gradient). The same checks as
// AllGather apply; an input that does not split into equal chunks is refused.
//
// NCCL reduce-scatters. Gloo has no reduce-scatter in libtorch (2.6 and later; c10d's
// reduce_scatter_tensor for Gloo is an all-reduce of a copy followed by a chunk), so
// under Gloo the input is copied, all-reduced in place and chunked: twice a
// reduce-scatter's traffic and a temporary the size of the input.
func (pg *ProcessGroup) ReduceScatter(out, in *torch.Tensor, op ReduceOp) error {
	return pg.pairs("reduce-scatter", []*torch.Tensor{out}, []*torch.Tensor{in}, false, &op)
}

// ReduceScatterCoalesced is ReduceScatter for a list of (outs[i], ins[i]) pairs in one
// collective per dtype and device, as FSDP2 reduces a unit's gradients: the inputs are
// laid out rank-major in one flat buffer (chunk r of every input, for each rank r),
// reduce-scattered, and this rank's chunk is copied out into the outputs.
func (pg *ProcessGroup) ReduceScatterCoalesced(outs, ins []*torch.Tensor, op ReduceOp) error {
	return pg.pairs("reduce-scatter", outs, ins, true, &op)
}

// pairs runs an all-gather (op nil) or a reduce-scatter with *op after checkPairs.
func (pg *ProcessGroup) pairs(what string, outs, ins []*torch.Tensor, list bool, op *ReduceOp) error {
	if err := pg.checkOpen(); err != nil {
		return err
	}
	if err := pg.checkPairs(what, outs, ins, list); err != nil {
		return err
	}
	if op == nil {
		if len(ins) == 0 {
			return nil
		}
		return wrap(pg.c.AllGather(outs, ins))
	}
	if err := checkOp(*op, ins); err != nil || len(ins) == 0 {
		return err
	}
	return wrap(pg.c.ReduceScatter(outs, ins, torch.ReduceOp(*op)))
}

// checkPairs checks all-gather and reduce-scatter arguments before any communication:
// as many outputs as inputs, no nil tensor, each pair of one dtype and device (a CUDA
// one under NCCL), and sizes that fit the world size.
func (pg *ProcessGroup) checkPairs(what string, outs, ins []*torch.Tensor, list bool) error {
	if len(outs) != len(ins) {
		return fmt.Errorf("distributed: %s: %d outputs for %d inputs", what, len(outs), len(ins))
	}
	w := int64(pg.WorldSize())
	for i := range ins {
		name := what
		if list {
			name = fmt.Sprintf("%s: pair %d", what, i)
		}
		out, in := outs[i], ins[i]
		if out == nil || in == nil {
			return fmt.Errorf("distributed: %s: nil tensor", name)
		}
		if od, id := out.DType(), in.DType(); od != id {
			return fmt.Errorf("distributed: %s: output is %s, input is %s", name, od, id)
		}
		od, id := out.Device(), in.Device()
		if od != id {
			return fmt.Errorf("distributed: %s: output is on %s, input on %s", name, od, id)
		}
		if pg.backend == NCCL && !id.IsCUDA() {
			return fmt.Errorf("distributed: %s: the NCCL backend needs CUDA tensors, and these are on %s", name, id)
		}
		on, inN := out.Numel(), in.Numel()
		switch what {
		case "all-gather":
			if on != w*inN {
				return fmt.Errorf("distributed: %s: output %v has %d elements, and must have world size %d × input %v's %d = %d",
					name, out.Shape(), on, w, in.Shape(), inN, w*inN)
			}
		default:
			if inN%w != 0 {
				return fmt.Errorf("distributed: %s: input %v has %d elements, which do not split into %d equal chunks (pad it to a multiple of the world size)",
					name, in.Shape(), inN, w)
			}
			if on*w != inN {
				return fmt.Errorf("distributed: %s: output %v has %d elements, and must have input %v's %d / world size %d = %d",
					name, out.Shape(), on, in.Shape(), inN, w, inN/w)
			}
		}
	}
	return nil
}

// AllReduceFloat64s reduces a few numbers (metric sums, flags) across ranks.
func (pg *ProcessGroup) AllReduceFloat64s(vs []float64, op ReduceOp) ([]float64, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	var out []float64
	var err error
	torch.WithScope(func() {
		t := torch.FromSlice(vs)
		if pg != nil && pg.backend == NCCL { // NCCL reduces GPU tensors only
			t = t.To(pg.Device(), false)
		}
		if err = pg.AllReduce([]*torch.Tensor{t}, op); err == nil {
			out = t.Float64s()
		}
	})
	return out, err
}

// AllReduceGradients averages the parameters' gradients across ranks, as DDP does after
// backward: parameters are grouped in order into buckets of about bucketBytes
// (0: DefaultBucketBytes), and each bucket is one flattened all-reduce (one cgo call).
// A parameter without a gradient takes part as zeros.
func (pg *ProcessGroup) AllReduceGradients(params []*torch.Tensor, bucketBytes int64) error {
	if err := pg.checkOpen(); err != nil {
		return err
	}
	if bucketBytes <= 0 {
		bucketBytes = DefaultBucketBytes
	}
	var bucket []*torch.Tensor
	var size int64
	flush := func() error {
		if len(bucket) == 0 {
			return nil
		}
		err := pg.c.AllReduceGrads(bucket)
		bucket, size = bucket[:0], 0
		return wrap(err)
	}
	for _, p := range params {
		n := p.Numel() * int64(p.DType().Size())
		if size > 0 && size+n > bucketBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		bucket = append(bucket, p)
		size += n
	}
	return flush()
}

// Barrier blocks until every rank reaches it.
func (pg *ProcessGroup) Barrier() error {
	if err := pg.checkOpen(); err != nil {
		return err
	}
	return wrap(pg.c.Barrier())
}

// unwrapTorch returns libtorch's message of a *torch.Error as the error.
func unwrapTorch(err error) error {
	var te *torch.Error
	if errors.As(err, &te) {
		return errors.New(te.Msg)
	}
	return err
}

// wrap turns libtorch's error into one that reads "distributed: ...".
func wrap(err error) error {
	var te *torch.Error
	if errors.As(err, &te) && !strings.HasPrefix(te.Msg, "distributed ") {
		return fmt.Errorf("distributed: %s", te.Msg)
	}
	return unwrapTorch(err)
}
