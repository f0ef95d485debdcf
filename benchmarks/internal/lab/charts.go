package lab

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// chart is one PNG written by writeCharts.
type chart struct {
	Title string
	// Path is relative to the directory holding report.html.
	Path string
}

// writeCharts draws one PNG per backend and workload into dir: throughput
// (top) and p99 latency (bottom) against the grid's points ordered by
// contention, one line per strategy, both on log scales. It returns the
// charts written, with paths relative to dir's parent.
func writeCharts(results []Result, dir string) ([]chart, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	type key struct{ backend, workload string }
	var keys []key
	groups := map[key][]Result{}
	for _, r := range results {
		k := key{r.Backend, r.Workload}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	var charts []chart
	for _, k := range keys {
		name := fmt.Sprintf("%s-%s.png", k.backend, k.workload)
		if err := writeChart(groups[k], k.backend, k.workload, filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("chart %s: %w", name, err)
		}
		charts = append(charts, chart{Title: k.backend + ", " + k.workload, Path: filepath.Join(filepath.Base(dir), name)})
	}
	return charts, nil
}

func writeChart(rs []Result, backend, workload, path string) error {
	// The x axis: the points, least contended first.
	type px struct {
		p point
		c float64
	}
	var pts []px
	seen := map[point]bool{}
	for _, r := range rs {
		if p := r.Point(); !seen[p] {
			seen[p] = true
			pts = append(pts, px{p, r.Contention})
		}
	}
	sort.SliceStable(pts, func(i, j int) bool {
		a, b := pts[i], pts[j]
		switch {
		case a.c != b.c:
			return a.c < b.c
		case a.p.Workers != b.p.Workers:
			return a.p.Workers < b.p.Workers
		}
		return a.p.WorkMs < b.p.WorkMs
	})
	xOf := map[point]float64{}
	ticks := make([]plot.Tick, len(pts))
	for i, p := range pts {
		xOf[p.p] = float64(i)
		ticks[i] = plot.Tick{Value: float64(i), Label: p.p.String()}
	}
	var names []string
	byName := map[string][]Result{}
	for _, r := range rs {
		if _, ok := byName[r.Strategy]; !ok {
			names = append(names, r.Strategy)
		}
		byName[r.Strategy] = append(byName[r.Strategy], r)
	}
	sortStrategies(names)

	top, bottom := plot.New(), plot.New()
	top.Title.Text = fmt.Sprintf("%s, %s: throughput", backend, workload)
	top.Y.Label.Text = "committed ops/s (log)"
	bottom.Title.Text = fmt.Sprintf("%s, %s: p99 latency", backend, workload)
	bottom.Y.Label.Text = "p99 ms (log)"
	bottom.X.Label.Text = "contention: workers, keys, Zipf θ (least contended left)"
	for _, p := range []*plot.Plot{top, bottom} {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = -0.3, float64(len(pts)-1)+0.3
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
	}
	ranges := map[*plot.Plot]*[2]float64{top: {}, bottom: {}}
	for i, n := range names {
		var thr, lat plotter.XYs
		cells := byName[n]
		sort.Slice(cells, func(a, b int) bool { return xOf[cells[a].Point()] < xOf[cells[b].Point()] })
		for _, r := range cells {
			x := xOf[r.Point()]
			// A log axis cannot show 0: a strategy that committed
			// nothing has no point there (the table says 0).
			if r.Throughput > 0 {
				thr = append(thr, plotter.XY{X: x, Y: r.Throughput})
			}
			if r.P99Ms > 0 {
				lat = append(lat, plotter.XY{X: x, Y: r.P99Ms})
			}
		}
		for _, t := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{top, thr}, {bottom, lat}} {
			if len(t.xys) == 0 {
				continue
			}
			rg := ranges[t.p]
			for _, xy := range t.xys {
				if rg[0] == 0 || xy.Y < rg[0] {
					rg[0] = xy.Y
				}
				rg[1] = max(rg[1], xy.Y)
			}
			l, s, err := plotter.NewLinePoints(t.xys)
			if err != nil {
				return err
			}
			l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
			l.Dashes = plotutil.Dashes(i / 7)
			l.Width = vg.Points(1.5)
			s.Shape = plotutil.Shape(i)
			t.p.Add(l, s)
			t.p.Legend.Add(n, l, s)
		}
	}
	// Room above the lines for the legend, and a little below.
	for p, rg := range ranges {
		if rg[0] > 0 {
			p.Y.Min, p.Y.Max = rg[0]/1.5, rg[1]*6
		}
	}
	const w, h = 9 * vg.Inch, 9 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(16)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// logTicks marks a log axis at 1, 2 and 5 times each power of ten, with
// short labels (200k, 1M, 0.05), and at every integer multiple when the
// range is too narrow for that.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	mark := func(mults []float64) {
		ticks = ticks[:0]
		for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
			for _, m := range mults {
				if v := m * math.Pow(10, e); v >= lo && v <= hi {
					ticks = append(ticks, plot.Tick{Value: v, Label: shortNumber(v)})
				}
			}
		}
	}
	mark([]float64{1, 2, 5})
	if len(ticks) < 3 {
		mark([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9})
	}
	return ticks
}

func shortNumber(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
