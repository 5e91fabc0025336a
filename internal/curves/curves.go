// Package curves draws training curves (loss, accuracy, ... per epoch) to a PNG file
// with gonum.org/v1/plot, so that a run directory shows how training went without
// TensorBoard.
//
// A Plot is a row of panels sharing one x axis (usually the epoch); each panel has
// its own y axis and one line per series. FromHistory builds the usual loss and
// accuracy panels from a trainer's per-epoch history columns.
package curves

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/gotrain/gotrain/internal/fsutil"
)

// ErrEmpty is returned by WritePNG for a plot with nothing to draw: no x values, no
// panels, or no finite value in any line.
var ErrEmpty = errors.New("curves: nothing to plot")

// Default image size, in pixels, of each panel.
const (
	DefaultPanelWidth = 560
	DefaultHeight     = 420
)

// dpi is the resolution the pixel sizes are given at; 96 keeps text readable.
const dpi = 96

// Plot is a figure of panels side by side that share the x values X.
type Plot struct {
	Title  string // drawn above the panels, if not empty
	XLabel string // the x axis label of every panel; "epoch" if empty
	X      []float64
	Panels []Panel
	Width  int // image width in pixels; DefaultPanelWidth per panel if 0
	Height int // image height in pixels; DefaultHeight if 0
}

// Panel is one chart of a Plot.
type Panel struct {
	Title  string
	YLabel string
	Lines  []Line
}

// Line is one series of a Panel: Y[i] is its value at the Plot's X[i]. NaN and
// infinite values (an epoch without validation, a diverged loss) are skipped, and
// the line joins the points on either side.
type Line struct {
	Name string // shown in the panel's legend
	Y    []float64
}

// FromHistory builds a Plot from per-epoch history columns, as a trainer records
// them (train_loss, val_loss, val_acc, ...): one "loss" panel with every column
// whose name contains "loss" and one "accuracy" panel with every column whose name
// contains "acc", each in sorted name order. Other columns are left out. A panel
// with no column is omitted.
func FromHistory(title string, epochs []float64, history map[string][]float64) Plot {
	names := make([]string, 0, len(history))
	for name := range history {
		names = append(names, name)
	}
	sort.Strings(names)
	loss := Panel{Title: "loss", YLabel: "loss"}
	acc := Panel{Title: "accuracy", YLabel: "accuracy"}
	for _, name := range names {
		switch lower := strings.ToLower(name); {
		case strings.Contains(lower, "loss"):
			loss.Lines = append(loss.Lines, Line{Name: name, Y: history[name]})
		case strings.Contains(lower, "acc"):
			acc.Lines = append(acc.Lines, Line{Name: name, Y: history[name]})
		}
	}
	p := Plot{Title: title, XLabel: "epoch", X: epochs}
	for _, panel := range []Panel{loss, acc} {
		if len(panel.Lines) > 0 {
			p.Panels = append(p.Panels, panel)
		}
	}
	return p
}

// WritePNG draws p and writes it to path as a PNG image, atomically
// (fsutil.WriteAtomic), so a reader never sees a partial image.
func WritePNG(path string, p Plot) error {
	return fsutil.WriteAtomic(path, func(w io.Writer) error { return Write(w, p) })
}

// Write draws p and writes it to w as a PNG image.
func Write(w io.Writer, p Plot) error {
	canvas, err := render(p)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: canvas}).WriteTo(w); err != nil {
		return fmt.Errorf("curves: %w", err)
	}
	return nil
}

// render checks p and draws it on an image canvas.
func render(p Plot) (*vgimg.Canvas, error) {
	if len(p.X) == 0 {
		return nil, fmt.Errorf("%w: empty history (no x values)", ErrEmpty)
	}
	if len(p.Panels) == 0 {
		return nil, fmt.Errorf("%w: no panels", ErrEmpty)
	}
	xlabel := p.XLabel
	if xlabel == "" {
		xlabel = "epoch"
	}
	plots := make([]*plot.Plot, len(p.Panels))
	points := 0
	for i, panel := range p.Panels {
		pl, n, err := panelPlot(panel, p.X, xlabel)
		if err != nil {
			return nil, err
		}
		plots[i], points = pl, points+n
	}
	if points == 0 {
		return nil, fmt.Errorf("%w: no finite values", ErrEmpty)
	}

	width, height := p.Width, p.Height
	if width <= 0 {
		width = DefaultPanelWidth * len(p.Panels)
	}
	if height <= 0 {
		height = DefaultHeight
	}
	px := func(n int) vg.Length { return vg.Length(n) * vg.Inch / dpi }
	canvas := vgimg.NewWith(vgimg.UseWH(px(width), px(height)), vgimg.UseDPI(dpi))
	dc := draw.New(canvas)
	if p.Title != "" {
		// A figure title: the panels keep their own titles below it.
		sty := plot.New().Title.TextStyle
		sty.Font.Size = vg.Points(14)
		sty.YAlign = draw.YTop
		h := sty.Rectangle(p.Title).Size().Y
		dc.FillText(sty, vg.Point{X: dc.Center().X, Y: dc.Max.Y - vg.Points(6)}, p.Title)
		dc = draw.Crop(dc, 0, 0, 0, -(h + vg.Points(12)))
	}
	tiles := draw.Tiles{
		Rows: 1, Cols: len(plots),
		PadX: vg.Points(12), PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(8),
	}
	for i, c := range plot.Align([][]*plot.Plot{plots}, tiles, dc)[0] {
		plots[i].Draw(c)
	}
	return canvas, nil
}

// panelPlot builds one panel's plot and returns how many points it draws.
func panelPlot(panel Panel, x []float64, xlabel string) (*plot.Plot, int, error) {
	pl := plot.New()
	pl.Title.Text = panel.Title
	pl.X.Label.Text = xlabel
	pl.Y.Label.Text = panel.YLabel
	pl.Legend.XOffs = -vg.Points(6)
	pl.Legend.YOffs = -vg.Points(4)
	pl.Add(gridLines())
	total := 0
	var ends []float64 // each line's last finite value, to place the legend
	var lo, hi = math.Inf(1), math.Inf(-1)
	for j, line := range panel.Lines {
		if len(line.Y) != len(x) {
			return nil, 0, fmt.Errorf("curves: panel %q line %q has %d values for %d x values",
				panel.Title, line.Name, len(line.Y), len(x))
		}
		xys := make(plotter.XYs, 0, len(x))
		for k, y := range line.Y {
			if finite(x[k]) && finite(y) {
				xys = append(xys, plotter.XY{X: x[k], Y: y})
			}
		}
		if len(xys) == 0 {
			continue
		}
		total += len(xys)
		ends = append(ends, xys[len(xys)-1].Y)
		for _, xy := range xys {
			lo, hi = math.Min(lo, xy.Y), math.Max(hi, xy.Y)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, 0, fmt.Errorf("curves: panel %q line %q: %w", panel.Title, line.Name, err)
		}
		l.Color = plotutil.Color(j)
		l.Width = vg.Points(1.5)
		thumbs := []plot.Thumbnailer{l}
		pl.Add(l)
		if len(xys) <= 40 { // on a long run, dots only blur the line
			s, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, 0, fmt.Errorf("curves: panel %q line %q: %w", panel.Title, line.Name, err)
			}
			s.Color = l.Color
			s.Shape = draw.CircleGlyph{}
			s.Radius = vg.Points(2.5)
			pl.Add(s)
			thumbs = append(thumbs, s)
		}
		pl.Legend.Add(line.Name, thumbs...)
	}
	// The legend goes in the right-hand corner away from where the lines end: top
	// for a falling loss, bottom for a rising accuracy.
	if hi > lo {
		mean := 0.0
		for _, y := range ends {
			mean += (y - lo) / (hi - lo)
		}
		pl.Legend.Top = mean/float64(len(ends)) < 0.5
		if !pl.Legend.Top {
			pl.Legend.YOffs = vg.Points(4)
		}
	} else {
		pl.Legend.Top = true
	}
	if total == 0 {
		// Without data the axes have no range; give them one so the panel still draws.
		pl.X.Min, pl.X.Max = minMax(x)
		pl.Y.Min, pl.Y.Max = 0, 1
	}
	return pl, total, nil
}

func gridLines() *plotter.Grid {
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 225}
	g.Horizontal.Color = color.Gray{Y: 225}
	return g
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// minMax returns the range of the finite values of x, or 0..1 if there are none.
func minMax(x []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range x {
		if finite(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if lo > hi {
		return 0, 1
	}
	if lo == hi {
		return lo - 1, hi + 1
	}
	return lo, hi
}
