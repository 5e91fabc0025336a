package trainer

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress shows an epoch's progress at its logging points (every `every` batches and
// the last): a bar redrawn in place on a terminal, lines otherwise (logs, CI). The
// Trainer reads its metrics from the device only at these points.
type progress struct {
	w       io.Writer
	tty     bool
	epoch   int
	target  int
	total   int
	every   int
	started time.Time
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, epoch, target, total, every int) *progress {
	tty := w != nil && isTerminal(w)
	if every <= 0 {
		every = max(total/10, 1)
		if tty {
			every = max(total/50, 1)
		}
	}
	return &progress{w: w, tty: tty, epoch: epoch, target: target, total: total, every: every, started: time.Now()}
}

// due reports whether batch (1-based) is a logging point.
func (p *progress) due(batch int) bool { return batch%p.every == 0 || batch == p.total }

// nextDue is the first logging point after batch (1-based): the batch at which a run of
// batches must stop so that the point is read as usual.
func (p *progress) nextDue(batch int) int {
	return min((batch/p.every+1)*p.every, max(p.total, batch+1))
}

// update shows the epoch's running mean loss at a logging point.
func (p *progress) update(batch int, loss float64) {
	if p.w == nil {
		return
	}
	if p.tty {
		const width = 30
		done := width * batch / max(p.total, 1)
		rate := float64(batch) / time.Since(p.started).Seconds()
		eta := time.Duration(float64(p.total-batch)/max(rate, 1e-9)) * time.Second
		fmt.Fprintf(p.w, "\rEpoch %d/%d [%s%s] %d/%d loss %.4f %.1f it/s eta %s ", p.epoch, p.target,
			strings.Repeat("=", done), strings.Repeat(" ", width-done), batch, p.total, loss, rate, eta.Round(time.Second))
		return
	}
	fmt.Fprintf(p.w, "  epoch %d batch %d/%d, loss: %.4f (%.1fs)\n", p.epoch, batch, p.total, loss, time.Since(p.started).Seconds())
}

func (p *progress) done() {
	if p.w != nil && p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
