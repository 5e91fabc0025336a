package tensorboard_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gotrain/gotrain/internal/testpy"
	"github.com/gotrain/gotrain/tensorboard"
)

const config = "```json\n{\"lr\": 0.001, \"epochs\": 3, \"model\": \"résnet\"}\n```"

// writeSample writes the scalars and text the tests read back.
func writeSample(t *testing.T, dir string) string {
	t.Helper()
	w, err := tensorboard.NewWriter(dir)
	require.NoError(t, err)
	require.NoError(t, w.AddText("config", config, 0))
	for step := int64(0); step < 25; step++ {
		require.NoError(t, w.AddScalar("loss/train", 1/float64(step+1), step))
		require.NoError(t, w.AddScalars(step, map[string]float64{
			"acc/val": 0.1 * float64(step),
			"lr":      1e-3 * float64(step),
		}))
	}
	require.NoError(t, w.AddScalar("big", 1e40, 3)) // beyond float32: +Inf, as in numpy
	require.NoError(t, w.AddText("notes", "second *entry*", 7))
	require.NoError(t, w.Close())
	return w.Path()
}

func TestFileName(t *testing.T) {
	dir := t.TempDir()
	w1, err := tensorboard.NewWriter(filepath.Join(dir, "run"))
	require.NoError(t, err)
	w2, err := tensorboard.NewWriter(filepath.Join(dir, "run"))
	require.NoError(t, err)
	require.NoError(t, w1.Close())
	require.NoError(t, w2.Close())
	assert.NotEqual(t, w1.Path(), w2.Path())

	host, err := os.Hostname()
	require.NoError(t, err)
	re := regexp.MustCompile(`^events\.out\.tfevents\.(\d{10})\.` + regexp.QuoteMeta(host) +
		`\.` + strconv.Itoa(os.Getpid()) + `\.\d+$`)
	m := re.FindStringSubmatch(filepath.Base(w1.Path()))
	require.NotNil(t, m, w1.Path())
	sec, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, time.Now().Unix(), sec, 60)

	assert.ErrorIs(t, w1.Close(), tensorboard.ErrClosed)
	assert.ErrorIs(t, w1.AddScalar("x", 1, 1), tensorboard.ErrClosed)
}

func TestFraming(t *testing.T) {
	path := writeSample(t, t.TempDir())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	// A 24-byte file_version event: every event file starts with these 12 bytes.
	assert.Equal(t, []byte{0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22}, raw[:12])

	events, err := tensorboard.ReadEvents(bytes.NewReader(raw))
	require.NoError(t, err)
	require.Len(t, events, 1+1+25*2+2)
	assert.Equal(t, tensorboard.FileVersion, events[0].FileVersion)
	assert.InDelta(t, float64(time.Now().UnixNano())/1e9, events[0].WallTime, 60)

	ev := events[2] // AddScalar at step 0; events[1] is the config text
	require.Len(t, ev.Values, 1)
	assert.Equal(t, tensorboard.Value{Tag: "loss/train", Kind: tensorboard.ScalarValue, Scalar: 1}, ev.Values[0])
	ev = events[2+2*4+1] // AddScalars at step 4
	assert.Equal(t, int64(4), ev.Step)
	require.Len(t, ev.Values, 2)
	assert.Equal(t, "acc/val", ev.Values[0].Tag)
	assert.Equal(t, float32(0.4), ev.Values[0].Scalar)
	assert.Equal(t, "lr", ev.Values[1].Tag)
	assert.Equal(t, float32(4e-3), ev.Values[1].Scalar)

	text := events[1].Values[0]
	assert.Equal(t, tensorboard.Value{Tag: "config", Plugin: "text", Kind: tensorboard.TextValue, Text: config}, text)
}

func TestCorruption(t *testing.T) {
	raw, err := os.ReadFile(writeSample(t, t.TempDir()))
	require.NoError(t, err)
	all, err := tensorboard.ReadRecords(bytes.NewReader(raw))
	require.NoError(t, err)
	second := 12 + len(all[0]) + 4 // offset of the second record

	for _, tc := range []struct {
		name string
		at   int // byte to flip
	}{
		{"length", second + 1},
		{"length checksum", second + 9},
		{"data", second + 12 + 3},
		{"data checksum", second + 12 + len(all[1]) + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Clone(raw)
			bad[tc.at] ^= 0x40
			records, err := tensorboard.ReadRecords(bytes.NewReader(bad))
			require.ErrorIs(t, err, tensorboard.ErrCorrupt)
			assert.Len(t, records, 1, "the records before the damage are returned")
		})
	}

	t.Run("truncated", func(t *testing.T) {
		records, err := tensorboard.ReadRecords(bytes.NewReader(raw[:len(raw)-2]))
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		assert.Len(t, records, len(all)-1)
	})
}

func TestPeriodicFlush(t *testing.T) {
	dir := t.TempDir()
	w, err := tensorboard.NewWriter(dir, tensorboard.WithMaxPending(3), tensorboard.WithFlushInterval(50*time.Millisecond))
	require.NoError(t, err)
	defer w.Close()
	count := func() int {
		f, err := os.Open(w.Path())
		require.NoError(t, err)
		defer f.Close()
		events, err := tensorboard.ReadEvents(f)
		require.NoError(t, err)
		return len(events)
	}
	assert.Equal(t, 1, count(), "the file_version event is written at once")
	require.NoError(t, w.AddScalar("a", 1, 1))
	require.NoError(t, w.AddScalar("a", 2, 2))
	assert.Equal(t, 1, count())
	require.NoError(t, w.AddScalar("a", 3, 3))
	assert.Equal(t, 4, count(), "MaxPending events are written")
	require.NoError(t, w.AddScalar("a", 4, 4))
	assert.Eventually(t, func() bool { return count() == 5 }, 5*time.Second, 10*time.Millisecond,
		"the flush timer writes a waiting event")
}

func TestConcurrent(t *testing.T) {
	w, err := tensorboard.NewWriter(t.TempDir(), tensorboard.WithMaxPending(7))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				assert.NoError(t, w.AddScalar("g"+strconv.Itoa(g), float64(i), int64(i)))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, w.Close())
	f, err := os.Open(w.Path())
	require.NoError(t, err)
	defer f.Close()
	events, err := tensorboard.ReadEvents(f)
	require.NoError(t, err)
	assert.Len(t, events, 1+400)
}

// TestTensorBoardReads reads the file back with the tensorboard package's own
// EventAccumulator.
func TestTensorBoardReads(t *testing.T) {
	dir := t.TempDir()
	writeSample(t, dir)
	out := testpy.Run(t, `
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
res = {
    "scalar_tags": sorted(tags["scalars"]),
    "tensor_tags": sorted(tags["tensors"]),
    "scalars": {t: [[e.step, e.value if math.isfinite(e.value) else str(e.value)] for e in acc.Scalars(t)] for t in tags["scalars"]},
    "text": {t: [[e.step, [s.decode() for s in tensor_util.make_ndarray(e.tensor_proto).tolist()]]
                 for e in acc.Tensors(t)] for t in tags["tensors"]},
    "plugins": {t: acc.SummaryMetadata(t).plugin_data.plugin_name for t in tags["tensors"]},
    "text_tags": sorted(acc.PluginTagToContent("text")),
}
json.dump(res, sys.stdout, default=str)
`, []string{"tensorboard"}, dir)

	var got struct {
		ScalarTags []string            `json:"scalar_tags"`
		TensorTags []string            `json:"tensor_tags"`
		Scalars    map[string][][2]any `json:"scalars"`
		Text       map[string][][2]any `json:"text"`
		Plugins    map[string]string   `json:"plugins"`
		TextTags   []string            `json:"text_tags"`
	}
	require.NoError(t, json.Unmarshal(out, &got), string(out))
	assert.Equal(t, []string{"acc/val", "big", "loss/train", "lr"}, got.ScalarTags)
	assert.Equal(t, []string{"config", "notes"}, got.TensorTags)
	assert.Equal(t, []string{"config", "notes"}, got.TextTags)
	assert.Equal(t, map[string]string{"config": "text", "notes": "text"}, got.Plugins)

	want := map[string]func(step int64) float64{
		"loss/train": func(s int64) float64 { return 1 / float64(s+1) },
		"acc/val":    func(s int64) float64 { return 0.1 * float64(s) },
		"lr":         func(s int64) float64 { return 1e-3 * float64(s) },
	}
	for tag, f := range want {
		series := got.Scalars[tag]
		require.Len(t, series, 25, tag)
		for i, p := range series {
			assert.Equal(t, float64(i), p[0], tag)
			assert.Equal(t, float64(float32(f(int64(i)))), p[1], "%s step %d", tag, i)
		}
	}
	assert.Equal(t, [][2]any{{3.0, "inf"}}, got.Scalars["big"])
	assert.Equal(t, [][2]any{{0.0, []any{config}}}, got.Text["config"])
	assert.Equal(t, [][2]any{{7.0, []any{"second *entry*"}}}, got.Text["notes"])
}
