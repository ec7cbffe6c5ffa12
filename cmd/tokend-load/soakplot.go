package main

import (
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// writeSoakPlot draws soak.svg in dir: per window, CPU per request; p99 per
// request kind and the feed's and webhooks' lag; tokend's tables and RSS.
func writeSoakPlot(dir string, res *SoakResult) (string, error) {
	svg := vgsvg.New(10*vg.Inch, 11*vg.Inch)
	drawTiles(soakPlots(res), svg)
	path := filepath.Join(dir, "soak.svg")
	return path, writeCanvas(path, svg)
}

// soakPlots are writeSoakPlot's three panels, one above the other.
func soakPlots(res *SoakResult) [][]*plot.Plot {
	end := func(w SoakWindow) float64 { return w.EndS / 60 }
	series := func(p *plot.Plot, name string, i int, y func(SoakWindow) float64) {
		var xys plotter.XYs
		for _, w := range res.Windows {
			if v := y(w); v > 0 {
				xys = append(xys, plotter.XY{X: end(w), Y: v})
			}
		}
		if len(xys) == 0 {
			return
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return
		}
		c := plotutil.Color(i)
		l.Color, l.Width, s.Color, s.Radius = c, vg.Points(1.2), c, vg.Points(2)
		p.Add(l, s)
		p.Legend.Add(name, l, s)
	}
	newPlot := func(title, ylabel string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "minutes since the start (window end)"
		p.Y.Label.Text = ylabel
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		return p
	}

	cpu := newPlot("CPU per request", "µs")
	series(cpu, "Postgres", 0, func(w SoakWindow) float64 { return w.PgCPUUs })
	series(cpu, "tokend", 1, func(w SoakWindow) float64 { return w.TokendCPUUs })
	series(cpu, "load", 2, func(w SoakWindow) float64 { return w.LoadCPUUs })
	cpu.Y.Min = 0

	p99 := newPlot("p99 per kind, and lag p99", "ms (log)")
	p99.Y.Scale, p99.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	for i, k := range append(append([]string{}, requestKinds...), lagKinds...) {
		series(p99, k, i, func(w SoakWindow) float64 { return w.Kinds[k].P99 })
	}
	keepLogAxesValid(p99, true)

	mem := newPlot("tokend's tables and RSS", "MiB")
	series(mem, "tokend's tables", 0, func(w SoakWindow) float64 { return float64(w.TokendTableBytes()) / (1 << 20) })
	series(mem, "tokend RSS", 1, func(w SoakWindow) float64 { return float64(w.RSSKB) / 1024 })
	series(mem, "tokend heap in use", 2, func(w SoakWindow) float64 { return float64(w.HeapBytes) / (1 << 20) })
	mem.Y.Min = 0
	var top float64
	for _, w := range res.Windows {
		top = max(top, float64(w.TokendTableBytes())/(1<<20), float64(w.RSSKB)/1024)
	}
	if h := res.Config.horizon().Seconds() / 60; h > 0 && top > 0 {
		line, err := plotter.NewLine(plotter.XYs{{X: h, Y: 0}, {X: h, Y: top}})
		if err == nil {
			line.Color, line.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(3), vg.Points(3)}
			mem.Add(line)
			mem.Legend.Add("retention horizon", line)
		}
	}

	return [][]*plot.Plot{{cpu}, {p99}, {mem}}
}
