package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
)

// modelPy saves a tiny byte-level Qwen2 directory (no chat template) to argv[1].
const modelPy = `
import os, sys, torch, transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
transformers.logging.set_verbosity_error()
d = sys.argv[1]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(["The quick brown fox jumps over the lazy dog."] * 3, trainers.BpeTrainer(
    vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(d)
torch.manual_seed(0)
cfg = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  eos_token_id=tok.token_to_id("<|endoftext|>"))
Qwen2ForCausalLM(cfg).save_pretrained(d)
`

// TestMain runs the command itself when the test binary is started as the server.
func TestMain(m *testing.M) {
	if os.Getenv("GOTRAIN_SERVE_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"--model"}, {"--model", "x", "extra"}, {"--model", "x", "--dtype", "int8"},
		{"--model", "x", "--max-batch", "0"}, {"--model", "x", "--adapter", "nodir"}} {
		var stderr bytes.Buffer
		assert.Equal(t, 2, run(context.Background(), args, &stderr), "%q", args)
		assert.Contains(t, stderr.String(), "usage: serve", "%q", args)
	}
	var stderr bytes.Buffer
	assert.Equal(t, 1, run(context.Background(), []string{"--model", t.TempDir()}, &stderr))
	assert.Contains(t, stderr.String(), "tokenizer.json")
}

// TestSIGTERMMidStream: the server process, sent SIGTERM in the middle of a stream,
// stops taking connections, finishes the stream (finish_reason and [DONE]) and exits 0.
func TestSIGTERMMidStream(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "model")
	testpy.Run(t, modelPy, []string{"torch", "transformers", "tokenizers"}, dir)
	cmd := exec.Command(os.Args[0], "--model", dir, "--addr", "127.0.0.1:0", "--shutdown-timeout", "60s")
	cmd.Env = append(os.Environ(), "GOTRAIN_SERVE_TEST_MAIN=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	require.True(t, lines.Scan(), "the server's first line")
	m := regexp.MustCompile(`on http://(\S+)/v1`).FindStringSubmatch(lines.Text())
	require.NotNil(t, m, lines.Text())
	addr := m[1]
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()

	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "The quick", "max_tokens": 100, "ignore_eos": true, "stream": true, "temperature": 0}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first, "data: "), first)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 10*time.Second, 5*time.Millisecond, "the listener closes")
	body, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"), "%s", body)
	assert.Contains(t, string(body), `"finish_reason":"length"`)
	require.NoError(t, cmd.Wait(), "exit status 0")
	assert.Contains(t, <-rest, "shutting down")
}
