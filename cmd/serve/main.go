// Command serve serves a Hugging Face model directory (and LoRA adapters on it) with
// OpenAI's API: chat and completions, streamed or not, continuous batching, Prometheus
// metrics. See docs/serving.md.
//
//	serve --model DIR [--adapter NAME=DIR]... [--addr 127.0.0.1:8000] [--api-key KEY]
//
// SIGTERM or SIGINT stops it gracefully: no new connection or request is taken, the
// requests taken finish (within --shutdown-timeout, after which they are ended), and it
// exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/internal/lmdir"
	"github.com/gotrain/gotrain/serve"
	"github.com/gotrain/gotrain/torch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr))
}

const usageLine = `usage: serve --model DIR [--adapter NAME=DIR]... [--name ID] [--device cpu|cuda|cuda:N]
             [--dtype float32|bfloat16|float16] [--addr HOST:PORT] [--api-key KEY]
             [--max-batch N] [--max-queue N] [--max-tokens N] [--kv-blocks N | --kv-memory MIB]
             [--max-body BYTES] [--shutdown-timeout D]`

// adapters is --adapter NAME=DIR, repeatable.
type adapters []serve.Adapter

func (a *adapters) String() string {
	var s []string
	for _, x := range *a {
		s = append(s, x.Name+"="+x.Dir)
	}
	return strings.Join(s, ", ")
}

func (a *adapters) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || name == "" || dir == "" {
		return fmt.Errorf("want NAME=DIR, got %q", v)
	}
	*a = append(*a, serve.Adapter{Name: name, Dir: dir})
	return nil
}

// run is the command: it serves until ctx is done (a signal), then shuts down.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	var (
		cfg                      serve.Config
		ads                      adapters
		device, dtype, addr, key string
		maxBody, kvMiB           int64
		shutdownTimeout          time.Duration
	)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.Model, "model", "", "Hugging Face model `DIR` (required)")
	fs.Var(&ads, "adapter", "serve the LoRA adapter in `NAME=DIR` (PEFT's files) as model NAME (repeatable)")
	fs.StringVar(&cfg.Name, "name", "", "the base model's `ID` in the API (default: the directory's name)")
	fs.StringVar(&device, "device", "cpu", "`DEVICE`: cpu, cuda or cuda:N")
	fs.StringVar(&dtype, "dtype", "float32", "`DTYPE` of the weights: float32 (fp32), bfloat16 (bf16) or float16 (fp16)")
	fs.StringVar(&addr, "addr", "127.0.0.1:8000", "listen on `HOST:PORT`")
	fs.StringVar(&key, "api-key", os.Getenv("GOTRAIN_API_KEY"), "require `KEY` as the bearer token of /v1/ requests (default $GOTRAIN_API_KEY; none: open)")
	fs.IntVar(&cfg.MaxBatch, "max-batch", 32, "decode at most `N` sequences together")
	fs.IntVar(&cfg.MaxQueue, "max-queue", 256, "let at most `N` requests wait; more get 429")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", 0, "the most new tokens a request may ask for, and the default (0: the model's context)")
	fs.Int64Var(&cfg.KVBlocks, "kv-blocks", 0, fmt.Sprintf("the KV cache's size in blocks of %d positions (0: --max-batch full contexts)", serve.BlockSize))
	fs.Int64Var(&kvMiB, "kv-memory", 0, "size the KV cache to `MIB` mebibytes instead of --kv-blocks")
	fs.Int64Var(&maxBody, "max-body", 4<<20, "refuse request bodies over `BYTES`")
	fs.DurationVar(&shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, let running requests finish for at most `D`")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, usageLine)
			fmt.Fprintln(stderr)
			fs.PrintDefaults()
			return 0
		}
		return usage(stderr, err)
	}
	if fs.NArg() > 0 {
		return usage(stderr, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if cfg.Model == "" {
		return usage(stderr, errors.New("--model is required"))
	}
	var err error
	if cfg.DType, err = lmdir.ParseDType(dtype); err != nil {
		return usage(stderr, fmt.Errorf("--dtype: %w", err))
	}
	if cfg.Device, err = torch.ParseDevice(device); err != nil {
		return usage(stderr, fmt.Errorf("--device: %w", err))
	}
	if cfg.MaxBatch < 1 || cfg.MaxQueue < 1 || cfg.MaxTokens < 0 || cfg.KVBlocks < 0 || kvMiB < 0 || maxBody < 1 {
		return usage(stderr, errors.New("--max-batch, --max-queue and --max-body must be positive, --max-tokens, --kv-blocks and --kv-memory not negative"))
	}
	cfg.Adapters = ads
	cfg.KVMemory = kvMiB << 20
	e, err := serve.NewEngine(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	}
	defer e.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	}
	st := e.Stats()
	fmt.Fprintf(stderr, "serve: %s (%s) on http://%s/v1; KV cache %d blocks of %d positions, %d MiB\n",
		strings.Join(e.Names(), ", "), cfg.Device, ln.Addr(), st.KVBlocks, serve.BlockSize, st.KVBytes>>20)
	srv := &http.Server{Handler: serve.NewHandler(e, serve.HandlerOptions{APIKey: key, MaxBodyBytes: maxBody}),
		ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	case <-ctx.Done():
	}
	fmt.Fprintln(stderr, "serve: shutting down: finishing the requests taken")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- e.Shutdown(sctx) }()
	// The listener closes at once; the handlers return as their requests finish.
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintln(stderr, "serve: shutdown:", err)
	}
	if err := <-drained; err != nil {
		fmt.Fprintln(stderr, "serve: requests still running at --shutdown-timeout were ended")
	}
	return 0
}

func usage(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "serve:", err)
	fmt.Fprintln(stderr, usageLine)
	return 2
}
