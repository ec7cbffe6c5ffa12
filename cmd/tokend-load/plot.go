package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Colours tell the operation; dashes and glyphs tell the side.
var (
	opColor = map[string]color.Color{
		opIssue:  color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		opSpend:  color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		opLookup: color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	}
	sideDashes = map[string][]vg.Length{
		sideLimit:   {vg.Points(5), vg.Points(3)},
		sideTokend:  nil,
		sideCached:  {vg.Points(1.5), vg.Points(2)},
		sideCeiling: {vg.Points(6), vg.Points(2), vg.Points(1.5), vg.Points(2)},
	}
	sideGlyph = map[string]draw.GlyphDrawer{
		sideLimit:   draw.SquareGlyph{},
		sideTokend:  draw.CircleGlyph{},
		sideCached:  draw.TriangleGlyph{},
		sideCeiling: draw.CrossGlyph{},
	}
)

// writePlots draws the summary into bench.png and bench.svg in dir:
// throughput, p99 latency and the tokend/limit ratio against concurrency, and
// spend throughput against table size.
func writePlots(dir string, res *Results) ([]string, error) {
	tiles := func() [][]*plot.Plot {
		return [][]*plot.Plot{
			{
				matrixPlot(res, "Throughput", "transactions / s (log)", true, func(r Row) float64 { return r.TPS }),
				matrixPlot(res, "p99 latency", "ms (log)", true, func(r Row) float64 { return r.P99 }),
			},
			{
				matrixPlot(res, "tokend / limit, paired runs", "ratio of tps", false, func(r Row) float64 {
					if r.Side == sideLimit {
						return 0
					}
					return r.Ratio
				}),
				growthPlot(res),
			},
		}
	}
	const w, h = 11 * vg.Inch, 8 * vg.Inch

	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(100))
	drawTiles(tiles(), img)
	pngPath := filepath.Join(dir, "bench.png")
	if err := writeCanvas(pngPath, vgimg.PngCanvas{Canvas: img}); err != nil {
		return nil, err
	}
	svg := vgsvg.New(w, h)
	drawTiles(tiles(), svg)
	svgPath := filepath.Join(dir, "bench.svg")
	if err := writeCanvas(svgPath, svg); err != nil {
		return nil, err
	}
	return []string{pngPath, svgPath}, nil
}

func drawTiles(plots [][]*plot.Plot, c vg.CanvasSizer) {
	dc := draw.New(c)
	pad := 5 * vg.Millimeter
	t := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadX: 2 * pad, PadY: 2 * pad,
		PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
}

func writeCanvas(path string, c io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// matrixPlot draws y(row) against concurrency for every operation and side of
// the matrix phase. Rows with y ≤ 0 are left out.
func matrixPlot(res *Results, title, ylabel string, logY bool, y func(Row) float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrency (clients)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	seen := map[int]bool{}
	for _, r := range res.Summary {
		if r.Phase == phaseMatrix && !seen[r.C] && r.C > 0 {
			seen[r.C] = true
			ticks = append(ticks, plot.Tick{Value: float64(r.C), Label: strconv.Itoa(r.C)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, op := range []string{opIssue, opSpend, opLookup} {
		for _, side := range []string{sideLimit, sideTokend, sideCached, sideCeiling} {
			var xys plotter.XYs
			for _, r := range res.Summary {
				if r.Phase == phaseMatrix && r.Op == op && r.Side == side && r.C > 0 {
					if v := y(r); v > 0 {
						xys = append(xys, plotter.XY{X: float64(r.C), Y: v})
						lo, hi = math.Min(lo, v), math.Max(hi, v)
					}
				}
			}
			addSeries(p, scenarioName(op, side), op, side, xys)
		}
	}
	if !logY && hi >= lo {
		// A ratio axis from 0, with 1 (parity with Postgres) in view.
		p.Y.Min, p.Y.Max = 0, math.Max(1.05, hi*1.1)
		one, _ := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: 1}, {X: p.X.Max, Y: 1}})
		if one != nil && p.X.Min > 0 {
			one.Color = color.Gray{Y: 0x80}
			p.Add(one)
		}
	}
	if logY && hi >= lo {
		// Log axes need a little air and at least a decade to label.
		p.Y.Min, p.Y.Max = lo/1.5, math.Max(hi*4, lo*10) // room for the legend
	}
	keepLogAxesValid(p, logY)
	return p
}

// growthPlot draws spend throughput against the number of rows in tokens.
func growthPlot(res *Results) *plot.Plot {
	p := plot.New()
	p.Title.Text = "Spend throughput vs stored tokens"
	p.X.Label.Text = "stored tokens (log)"
	p.Y.Label.Text = "transactions / s"
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, r := range res.Summary {
		if r.Phase == phaseGrowth && r.Side == sideLimit && r.TableRows > 0 {
			ticks = append(ticks, plot.Tick{Value: float64(r.TableRows), Label: humanCount(r.TableRows)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	c, hi := 0, 0.0
	for _, side := range []string{sideLimit, sideTokend} {
		var xys plotter.XYs
		for _, r := range res.Summary {
			if r.Phase == phaseGrowth && r.Op == opSpend && r.Side == side && r.TableRows > 0 && r.TPS > 0 {
				xys = append(xys, plotter.XY{X: float64(r.TableRows), Y: r.TPS})
				c, hi = r.C, math.Max(hi, r.TPS)
			}
		}
		addSeries(p, scenarioName(opSpend, side), opSpend, side, xys)
	}
	if c > 0 {
		p.Title.Text = fmt.Sprintf("Spend throughput vs stored tokens, C=%d", c)
	}
	p.Y.Min, p.Y.Max = 0, hi*1.4 // room for the legend
	p.Y.Tick.Marker = plainTicks{}
	if len(ticks) == 1 {
		p.X.Min, p.X.Max = float64(ticks[0].Value)/3, float64(ticks[0].Value)*3
	}
	keepLogAxesValid(p, false)
	return p
}

// keepLogAxesValid gives an empty plot ranges a log axis can draw (gonum
// panics on a log axis that reaches 0).
func keepLogAxesValid(p *plot.Plot, logY bool) {
	if p.X.Min <= 0 || p.X.Max <= p.X.Min {
		p.X.Min, p.X.Max = 1, 10
	}
	if logY && (p.Y.Min <= 0 || p.Y.Max <= p.Y.Min) {
		p.Y.Min, p.Y.Max = 1, 10
	}
	if !logY && p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
}

func addSeries(p *plot.Plot, name, op, side string, xys plotter.XYs) {
	if len(xys) == 0 {
		return
	}
	l, s, err := plotter.NewLinePoints(xys)
	if err != nil {
		return
	}
	l.Color, l.Width, l.Dashes = opColor[op], vg.Points(1.5), sideDashes[side]
	s.Color, s.Shape, s.Radius = opColor[op], sideGlyph[side], vg.Points(3)
	p.Add(l, s)
	p.Legend.Add(name, l, s)
}

// plainTicks are gonum's default ticks labelled without trailing zeros.
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}
