package lab

import (
	"encoding/csv"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/jsonfile"
)

// Meta describes a run in results.json and the report.
type Meta struct {
	Started    time.Time `json:"started"`
	ElapsedS   float64   `json:"elapsed_s"`
	Command    string    `json:"command"`
	GoVersion  string    `json:"go_version"`
	OS         string    `json:"os"`
	CPUs       int       `json:"cpus"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	// LoadAtStart and LoadAtEnd are the machine's load averages (1, 5
	// and 15 minutes) when the run started and ended: other work on a
	// shared machine shows here, and moves the absolute figures.
	LoadAtStart string `json:"load_at_start,omitempty"`
	LoadAtEnd   string `json:"load_at_end,omitempty"`
	Seed        uint64 `json:"seed"`
	// DurationS and WarmupS of each cell; OpsPerCell when cells ran a
	// count of operations instead.
	DurationS   float64 `json:"duration_s"`
	WarmupS     float64 `json:"warmup_s"`
	OpsPerCell  int64   `json:"ops_per_cell,omitempty"`
	MaxAttempts int     `json:"max_attempts"`
	// Durability states the durability of every backend, which must be
	// alike within a run for the ratios to mean anything.
	Durability string        `json:"durability"`
	Backends   []backendInfo `json:"backends"`
	Strategies []NameAbout   `json:"strategies"`
	Workloads  []NameAbout   `json:"workloads"`
	// Skipped lists backends that could not be opened and cells that did
	// not apply, with the reason; Failed the cells that could not run.
	Skipped []skip      `json:"skipped"`
	Failed  []skip      `json:"failed"`
	Goals   []goalCheck `json:"goals"`
	// Pooled pools the paired rounds of goals checked at several points
	// (runs with --repeat).
	Pooled []pooled `json:"pooled,omitempty"`
	// InvariantViolations counts cells whose invariant did not hold.
	InvariantViolations int `json:"invariant_violations"`
	// Summary is the run in a few lines.
	Summary Summary `json:"summary"`
}

// NameAbout is a strategy or workload with its description.
type NameAbout struct {
	Name  string `json:"name"`
	About string `json:"about"`
}

// Report is a finished run: what results.json holds.
type Report struct {
	Meta  Meta     `json:"meta"`
	Cells []Result `json:"cells"`
}

// NewReport assembles a report from a grid's outcomes.
func NewReport(l *Lab, g Grid, outcomes []outcome, planSkips []skip, started time.Time, command string) *Report {
	r := &Report{Meta: Meta{
		Started:     started.UTC().Truncate(time.Second),
		ElapsedS:    time.Since(started).Seconds(),
		Command:     command,
		GoVersion:   runtime.Version(),
		OS:          runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:        runtime.NumCPU(),
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		Seed:        g.Seed,
		LoadAtEnd:   LoadAverage(),
		MaxAttempts: g.MaxAttempts,
		Backends:    l.Infos(),
		Skipped:     append(l.Skipped(), planSkips...),
	}}
	if r.Meta.MaxAttempts == 0 {
		r.Meta.MaxAttempts = DefaultMaxAttempts
	}
	seenS, seenW := map[string]bool{}, map[string]bool{}
	for _, o := range outcomes {
		if r.Meta.DurationS == 0 && r.Meta.OpsPerCell == 0 {
			r.Meta.DurationS, r.Meta.WarmupS = o.Cell.Duration.Seconds(), o.Cell.Warmup.Seconds()
			if o.Cell.Duration <= 0 {
				r.Meta.OpsPerCell = o.Cell.Ops
			}
		}
		switch {
		case o.Result != nil:
			r.Cells = append(r.Cells, *o.Result)
			if !o.Result.InvariantOK {
				r.Meta.InvariantViolations++
			}
		case o.Skipped():
			r.Meta.Skipped = append(r.Meta.Skipped, skip{Name: CellName(o.Cell), Reason: o.Err.Error()})
		default:
			r.Meta.Failed = append(r.Meta.Failed, skip{Name: CellName(o.Cell), Reason: o.Err.Error()})
		}
		if !seenS[o.Cell.Strategy] {
			seenS[o.Cell.Strategy] = true
			if s, ok := lookupStrategy(o.Cell.Strategy); ok {
				r.Meta.Strategies = append(r.Meta.Strategies, NameAbout{s.Name, s.About})
			}
		}
		if !seenW[o.Cell.Workload] {
			seenW[o.Cell.Workload] = true
			if w, ok := lookupWorkload(o.Cell.Workload); ok {
				r.Meta.Workloads = append(r.Meta.Workloads, NameAbout{w.Name, w.About})
			}
		}
	}
	sort.SliceStable(r.Meta.Strategies, func(i, j int) bool {
		return strategyRank(r.Meta.Strategies[i].Name) < strategyRank(r.Meta.Strategies[j].Name)
	})
	var dur []string
	for _, b := range r.Meta.Backends {
		dur = append(dur, b.Name+": "+b.Durability)
	}
	r.Meta.Durability = strings.Join(dur, "; ")
	markBlindWrite(r.Cells)
	r.Meta.Goals = checkGoals(r.Cells)
	r.Meta.Pooled = poolRounds(r.Meta.Goals)
	r.Meta.Summary = summarize(r.Cells, r.Meta.Goals)
	return r
}

// markBlindWrite sets each cell's throughput as a fraction of the
// blind-write cell at its point, where one ran.
func markBlindWrite(cells []Result) {
	key := func(c Result) string {
		return fmt.Sprintf("%s|%s|%v|%s", c.Backend, c.Workload, c.Point(), setupSuffix(c))
	}
	blind := map[string]float64{}
	for _, c := range cells {
		if c.Strategy == "blind-write" && c.InvariantOK && c.Throughput > 0 {
			blind[key(c)] = c.Throughput
		}
	}
	for i := range cells {
		if b, ok := blind[key(cells[i])]; ok {
			cells[i].OfBlindWrite = cells[i].Throughput / b
		}
	}
}

// LoadAverage returns the machine's load averages over 1, 5 and 15
// minutes ("0.52 0.58 0.59"), or "" where the system does not say.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// WriteMarkdown writes the results table, then the goal checks, the
// skipped and failed cells and any invariant violation.
func (r *Report) WriteMarkdown(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("| backend | workload | point | strategy | ops/s | ÷ blind-write | p50 ms | p99 ms | p99.9 ms | max ms | attempts/op | failed | fenced | committers | invariant |\n")
	ew.printf("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, c := range r.Cells {
		inv := "ok"
		if !c.InvariantOK {
			inv = "**VIOLATED**"
		}
		ofBlind := "–"
		if c.OfBlindWrite > 0 {
			ofBlind = fmt.Sprintf("%.2f", c.OfBlindWrite)
		}
		ew.printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %d | %d | %d/%d | %s |\n",
			c.Backend, c.Workload, c.Point(), c.Strategy, rate(c.Throughput), ofBlind,
			msStr(c.P50Ms), msStr(c.P99Ms), msStr(c.P999Ms), msStr(c.MaxMs), c.AttemptsPerOp, c.FailedOps, c.FenceRejections,
			c.WorkersCommitted, c.Workers, inv)
	}
	ew.printf("\nDurability: %s.\n", r.Meta.Durability)
	if r.Meta.LoadAtStart != "" || r.Meta.LoadAtEnd != "" {
		ew.printf("Machine: %d CPUs; load average %s at the start, %s at the end.\n", r.Meta.CPUs, r.Meta.LoadAtStart, r.Meta.LoadAtEnd)
	}
	ew.printf("\n### Goal checks (ratios of throughputs measured side by side)\n\n")
	for _, g := range r.Meta.Goals {
		ratio := ""
		if g.Status != goalNA && !g.Count {
			ratio = fmt.Sprintf(" %.2f×", g.Ratio)
		}
		pt := g.Point.String()
		if g.Setup != "" {
			pt += " (" + g.Setup + ")"
		}
		ew.printf("- [%s]%s %s, %s, %s: %s — %s\n", g.Status, ratio, g.Backend, g.Workload, pt, g.Goal, g.Detail)
	}
	if len(r.Meta.Pooled) > 0 {
		ew.printf("\n### Rounds pooled over points (geometric mean of every paired round's ratio)\n\n")
		for _, p := range r.Meta.Pooled {
			ew.printf("- %s, %s: %.3f× over %d rounds at %d points (the rounds' ratios spread ±%.1f%% around it)\n",
				p.Backend, p.Goal, p.GeoMean, p.Rounds, p.Points, 100*p.SD)
		}
	}
	if len(r.Meta.Skipped) > 0 {
		ew.printf("\n### Skipped\n\n")
		for _, s := range r.Meta.Skipped {
			ew.printf("- %s: %s\n", s.Name, s.Reason)
		}
	}
	if len(r.Meta.Failed) > 0 {
		ew.printf("\n### Cells that could not run\n\n")
		for _, s := range r.Meta.Failed {
			ew.printf("- %s: %s\n", s.Name, s.Reason)
		}
	}
	for _, c := range r.Cells {
		if !c.InvariantOK {
			ew.printf("\n**INVARIANT VIOLATED** in %s %s %s %s: %s\n", c.Backend, c.Workload, c.Strategy, c.Point(), c.Invariant)
		}
	}
	ew.printf("\n### Summary\n\n")
	for _, l := range r.Meta.Summary.Lines() {
		ew.printf("- %s\n", l)
	}
	return ew.err
}

func msStr(x float64) string {
	switch {
	case x == 0:
		return "0"
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// csvHeader is results.csv's header: results.json's cell fields.
var csvHeader = []string{
	"backend", "strategy", "workload", "workers", "keys", "theta", "work_ms", "ops", "throughput",
	"p50_ms", "p99_ms", "p999_ms", "attempts_per_op", "fence_rejections", "invariant_ok",
	"max_ms", "failed_ops", "ambiguous_ops", "declined_ops", "workers_committed", "stalled_ops", "contention", "measured_s",
	"invariant", "error",
}

// WriteFiles writes results.json, results.csv, the charts (charts/*.png)
// and report.html into dir, creating it.
func (r *Report) WriteFiles(dir string) error {
	if err := jsonfile.Write(filepath.Join(dir, "results.json"), r); err != nil {
		return err
	}
	if err := r.writeCSV(filepath.Join(dir, "results.csv")); err != nil {
		return err
	}
	charts, err := writeCharts(r.Cells, filepath.Join(dir, "charts"))
	if err != nil {
		return err
	}
	return r.writeHTML(filepath.Join(dir, "report.html"), charts)
}

func (r *Report) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	ff := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	for _, c := range r.Cells {
		_ = w.Write([]string{
			c.Backend, c.Strategy, c.Workload, strconv.Itoa(c.Workers), strconv.Itoa(c.Keys), ff(c.Theta), ff(c.WorkMs),
			strconv.FormatInt(c.Ops, 10), ff(c.Throughput), ff(c.P50Ms), ff(c.P99Ms), ff(c.P999Ms), ff(c.AttemptsPerOp),
			strconv.FormatInt(c.FenceRejections, 10), strconv.FormatBool(c.InvariantOK),
			ff(c.MaxMs), strconv.FormatInt(c.FailedOps, 10), strconv.FormatInt(c.AmbiguousOps, 10), strconv.FormatInt(c.DeclinedOps, 10),
			strconv.Itoa(c.WorkersCommitted), strconv.FormatInt(c.StalledOps, 10), ff(c.Contention), ff(c.MeasuredS), c.Invariant, c.Error,
		})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"rate": rate, "ms": msStr,
	"f2":  func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) },
	"pct": func(x float64) float64 { return 100 * x },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>occkit contention lab</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#222}
table{border-collapse:collapse;font-size:90%}
td,th{border:1px solid #ccc;padding:.25em .5em}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fdd}
.met{color:#060}.NOT{color:#b00;font-weight:bold}.na{color:#666}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}
code{background:#f4f4f4;padding:0 .2em}
</style></head><body>
<h1>occkit contention lab</h1>
<h2>Summary</h2>
<ul class="summary">{{range .Meta.Summary.Lines}}<li>{{.}}</li>
{{end}}</ul>
<p>Started {{.Meta.Started.Format "2006-01-02 15:04:05 MST"}}, took {{printf "%.0f" .Meta.ElapsedS}} s.
<code>{{.Meta.Command}}</code>. {{.Meta.GoVersion}} on {{.Meta.OS}}, {{.Meta.CPUs}} CPUs (GOMAXPROCS {{.Meta.GOMAXPROCS}}){{if .Meta.LoadAtEnd}}, load average {{.Meta.LoadAtStart}} at the start and {{.Meta.LoadAtEnd}} at the end{{end}}.
{{if .Meta.OpsPerCell}}{{.Meta.OpsPerCell}} operations per cell{{else}}{{.Meta.DurationS}} s measured per cell after {{.Meta.WarmupS}} s of warm-up{{end}};
seed {{.Meta.Seed}}; at most {{.Meta.MaxAttempts}} attempts per operation.</p>
{{if .Meta.InvariantViolations}}<p class="NOT">{{.Meta.InvariantViolations}} cell(s) broke their workload's invariant: see the red rows.</p>{{end}}
<h2>Backends</h2>
<table><tr><th>backend</th><th>server</th><th>durability</th><th>lease lock (hybrid, adaptive)</th><th>occ backoff</th></tr>
{{range .Meta.Backends}}<tr><td>{{.Name}}</td><td>{{.Server}}</td><td>{{.Durability}}</td><td>{{.Locker}}</td><td>{{.BackOff}}</td></tr>
{{end}}</table>
<h2>Goal checks</h2>
<p>Ratios of throughputs measured side by side in this run.</p>
<ul>{{range .Meta.Goals}}<li><span class="{{if eq .Status "met"}}met{{else if eq .Status "n/a"}}na{{else}}NOT{{end}}">[{{.Status}}]{{if and (ne .Status "n/a") (not .Count)}} {{f2 .Ratio}}×{{end}}</span> {{.Backend}}, {{.Workload}}, {{.Point}}: {{.Goal}} — {{.Detail}}</li>
{{end}}</ul>
{{if .Meta.Pooled}}<p>Rounds pooled over points (geometric mean of every paired round's ratio):</p>
<ul>{{range .Meta.Pooled}}<li>{{.Backend}}, {{.Goal}}: {{printf "%.3f" .GeoMean}}× over {{.Rounds}} rounds at {{.Points}} points (the rounds' ratios spread ±{{printf "%.1f" (pct .SD)}}% around it)</li>
{{end}}</ul>{{end}}
<h2>Charts</h2>
{{range .Charts}}<h3>{{.Title}}</h3><img src="{{.Path}}" alt="{{.Title}}">
{{end}}
<h2>Results</h2>
<p>Throughput counts committed operations started in the measured window, per second; latencies are those of committed operations,
retries and lock waits included (an operation that started in the window counts however long it took);
attempts/op counts every attempt of every operation per committed one; "workers committed" counts the workers that committed
at least once within the window (a starved worker did not).</p>
<table><tr><th>backend</th><th>workload</th><th>point</th><th>strategy</th><th>ops/s</th><th>÷ blind-write</th><th>p50 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>attempts/op</th><th>failed</th><th>declined</th><th>fenced</th><th>workers committed</th><th>invariant</th></tr>
{{range .Cells}}<tr{{if not .InvariantOK}} class="bad"{{end}}><td>{{.Backend}}</td><td>{{.Workload}}</td><td>{{.Point}}</td><td>{{.Strategy}}</td>
<td class="n">{{rate .Throughput}}</td><td class="n">{{if gt .OfBlindWrite 0.0}}{{f2 .OfBlindWrite}}{{else}}–{{end}}</td><td class="n">{{ms .P50Ms}}</td><td class="n">{{ms .P99Ms}}</td><td class="n">{{ms .P999Ms}}</td><td class="n">{{ms .MaxMs}}</td>
<td class="n">{{f2 .AttemptsPerOp}}</td><td class="n">{{.FailedOps}}</td><td class="n">{{.DeclinedOps}}</td><td class="n">{{.FenceRejections}}</td><td class="n">{{.WorkersCommitted}}/{{.Workers}}</td>
<td>{{if .InvariantOK}}ok{{else}}VIOLATED: {{.Invariant}}{{end}}</td></tr>
{{end}}</table>
<h2>Strategies</h2><ul>{{range .Meta.Strategies}}<li><b>{{.Name}}</b>: {{.About}}</li>{{end}}</ul>
<h2>Workloads</h2><ul>{{range .Meta.Workloads}}<li><b>{{.Name}}</b>: {{.About}}</li>{{end}}</ul>
{{if .Meta.Skipped}}<h2>Skipped</h2><ul>{{range .Meta.Skipped}}<li>{{.Name}}: {{.Reason}}</li>{{end}}</ul>{{end}}
{{if .Meta.Failed}}<h2>Cells that could not run</h2><ul>{{range .Meta.Failed}}<li>{{.Name}}: {{.Reason}}</li>{{end}}</ul>{{end}}
</body></html>
`))

func (r *Report) writeHTML(path string, charts []chart) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = reportTemplate.Execute(f, struct {
		*Report
		Charts []chart
	}{r, charts})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
