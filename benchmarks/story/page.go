package story

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"slices"
)

// ReadReport decodes a Report from its JSON form (stories.json), so that
// the page can be drawn again without running the stories:
//
//	r, err := story.ReadReport(f)
//	...
//	err = story.WritePage(out, r)
//
// Fields it does not know are ignored.
func ReadReport(rd io.Reader) (*Report, error) {
	var r Report
	dec := json.NewDecoder(rd)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("story: reading report: %w", err)
	}
	return &r, nil
}

// WritePage writes r as one self-contained HTML page (stories.html): it
// loads nothing from the network, its styles, script and drawings are
// inline. The page opens with a table of every story × mode (lost
// updates / stale writes accepted / stale writes rejected), each cell a
// link to its timeline. Each story then has its title and about text, a
// switch with one button per mode that has a result, and for the chosen
// mode a verdict line, the outcome numbers and an SVG timeline with one
// lane per client: lease held (grant to release or expiry), believed held
// after an expiry, waiting for the lock, paused (hatched), renewals,
// reads, writes (red: a stale write the store accepted; green: a write
// the store rejected), faults and expiries, on an axis in milliseconds.
// Every mark has a tooltip with its time, token, value and detail.
//
// A mode is chosen by its button or by the URL's fragment, "#story/mode"
// (e.g. "#gc-pause/fenced"), so that a timeline can be linked to; without
// script every timeline is shown. Everything that comes from r is
// escaped. Results are drawn in the order of r.Stories and r.Modes, then
// any story or mode found only in r.Results in the order it first
// appears; of two results for the same story and mode the first is drawn.
// Names should not contain '/', which separates story from mode in the
// fragment.
func WritePage(w io.Writer, r *Report) error {
	if r == nil {
		return errors.New("story: WritePage: nil report")
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, buildPage(r)); err != nil {
		return fmt.Errorf("story: rendering page: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// The timeline's geometry, in SVG user units (pixels at 100%).
const (
	svgWidth   = 1120
	laneLeft   = 96 // left edge of the time axis; lane labels sit before it
	laneRight  = 24 // room after the end of the axis
	laneTop    = 8
	laneHeight = 60
	axisHeight = 34
	labelRunes = 12 // lane labels longer than this are cut (tooltip has all)
)

// pageView is what the page template draws: the report laid out, every
// coordinate computed, every string still raw (the template escapes).
type pageView struct {
	Started string
	Servers []string
	Command string
	Modes   []Info
	Rows    []summaryRow
	Stories []storyView
	CSP     string
	Script  template.JS
}

// summaryRow is one story in the summary table, a cell per mode.
type summaryRow struct {
	Story Info
	Cells []summaryCell
}

// summaryCell is one story × mode; Present is false when it was not run.
type summaryCell struct {
	Story, Mode string
	Present     bool
	Err         bool
	Safe        bool
	Lost        int64
	Accepted    int
	Rejected    int
}

// storyView is one story's section: its mode switch and a pane per mode
// that has a result; Missing names the modes that have none.
type storyView struct {
	Info
	Missing []string
	Panes   []paneView
}

// paneView is one result: verdict, outcome and timeline.
type paneView struct {
	Story    string
	Mode     Info
	First    bool
	Err      string
	Verdict  string
	Safe     bool
	Outcome  Outcome
	Blocked  string
	Duration string
	Timeline svgView
}

// buildPage lays r out for the template.
func buildPage(r *Report) pageView {
	stories := slices.Clone(r.Stories)
	modes := slices.Clone(r.Modes)
	haveStory := map[string]bool{}
	for _, s := range stories {
		haveStory[s.Name] = true
	}
	haveMode := map[string]bool{}
	for _, m := range modes {
		haveMode[m.Name] = true
	}
	type key struct{ story, mode string }
	results := map[key]*Result{}
	for i := range r.Results {
		res := &r.Results[i]
		if !haveStory[res.Story] {
			haveStory[res.Story] = true
			stories = append(stories, Info{Name: res.Story})
		}
		if !haveMode[res.Mode] {
			haveMode[res.Mode] = true
			modes = append(modes, Info{Name: res.Mode})
		}
		k := key{res.Story, res.Mode}
		if results[k] == nil {
			results[k] = res
		}
	}

	v := pageView{
		Servers: r.Servers,
		Command: r.Command,
		Modes:   modes,
		CSP:     pageCSP,
		Script:  template.JS(pageScript),
	}
	if !r.Started.IsZero() {
		v.Started = r.Started.Format("2006-01-02 15:04:05 MST")
	}
	for _, s := range stories {
		row := summaryRow{Story: s}
		sv := storyView{Info: s}
		for _, m := range modes {
			res := results[key{s.Name, m.Name}]
			cell := summaryCell{Story: s.Name, Mode: m.Name, Present: res != nil}
			if res == nil {
				row.Cells = append(row.Cells, cell)
				sv.Missing = append(sv.Missing, m.Name)
				continue
			}
			cell.Err = res.Err != ""
			cell.Safe = res.Safe
			cell.Lost = res.Outcome.LostUpdates
			cell.Accepted = res.Outcome.StaleAccepted
			cell.Rejected = res.Outcome.StaleRejected
			row.Cells = append(row.Cells, cell)
			verdict := res.Verdict
			switch {
			case verdict != "" || res.Err != "":
			case res.Safe:
				verdict = "no update lost, no stale write accepted"
			default:
				verdict = "unsafe: an update was lost or a stale write accepted"
			}
			sv.Panes = append(sv.Panes, paneView{
				Story:    s.Name,
				Mode:     m,
				First:    len(sv.Panes) == 0,
				Err:      res.Err,
				Verdict:  verdict,
				Safe:     res.Safe && res.Err == "",
				Outcome:  res.Outcome,
				Blocked:  msLabel(res.Outcome.Blocked),
				Duration: msLabel(res.Duration),
				Timeline: buildTimeline(res),
			})
		}
		if len(sv.Panes) == 0 {
			sv.Missing = nil // said once, as "no results"
		}
		v.Rows = append(v.Rows, row)
		v.Stories = append(v.Stories, sv)
	}
	return v
}

// pageScript switches modes: a click on a mode button, or a fragment
// "#story/mode", shows that mode's pane of that story and hides the
// others. It is kept free of comments: html/template would strip them,
// and the Content-Security-Policy allows exactly this text by its hash.
//
//go:embed page.js
var pageScript string

// pageCSP forbids every fetch: the page must need none. The script is
// allowed by its hash, so nothing injected into the page could run.
var pageCSP = func() string {
	sum := sha256.Sum256([]byte(pageScript))
	return "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; script-src 'sha256-" +
		base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

// pageCSS is the page's style sheet, inline (the page is one file).
//
//go:embed page.css
var pageCSS string

// pageHTML is the page's html/template: the summary table, then a
// section per story with a pane and a timeline per mode.
//
//go:embed page.html.tmpl
var pageHTML string

// pageTemplate is page.html.tmpl with page.css inside its <style> as the
// template "css": template text, so html/template keeps it as it is.
var pageTemplate = func() *template.Template {
	t := template.Must(template.New("page").Parse(pageHTML))
	template.Must(t.New("css").Parse(pageCSS))
	return t
}()
