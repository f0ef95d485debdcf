package story

// The timelines of the story page: one SVG a mode, a lane a client, drawn
// from the events the stories recorded.

import (
	"cmp"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// svgView is one timeline: its lanes, its axis and where its parts go.
type svgView struct {
	Story, Mode   string
	Width, Height int
	Lanes         []laneView
	Ticks         []tickView
	AxisY         string
	AxisY2        string
	AxisLabelY    string
	GridTop       string
	X0, X1        string
	Empty         bool
	EmptyY        string
	EmptyX        string
}

// laneView is one client's lane.
type laneView struct {
	Client string
	Label  string
	Odd    bool
	Y, H   string
	LabelY string
	Shapes []svgShape
}

// tickView is one mark of the time axis.
type tickView struct {
	X, Label string
}

// svgShape is one SVG element of a lane. El selects the element; the
// coordinate fields it does not use stay empty.
type svgShape struct {
	El             string // rect, line, circle, path, text
	Class          string
	X, Y, W, H     string
	X1, Y1, X2, Y2 string
	CX, CY, R      string
	D              string
	Text           string
	Anchor         string
	At             string // data-at, in ms, for event marks
	Kind           string // data-kind, for event marks
	Tip            string
}

// msLabel formats d in milliseconds, with one decimal below 100 ms.
func msLabel(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if math.Abs(ms) < 100 {
		return strconv.FormatFloat(math.Round(ms*10)/10, 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(math.Round(ms), 'f', 0, 64) + " ms"
}

// svgNum formats an SVG coordinate.
func svgNum(x float64) string {
	return strconv.FormatFloat(math.Round(x*10)/10, 'f', -1, 64)
}

// laneOrder returns the lanes of res: its Clients, then any client that
// has events but is not listed, in the order it first appears.
func laneOrder(res *Result) []string {
	lanes := slices.Clone(res.Clients)
	seen := map[string]bool{}
	for _, c := range lanes {
		seen[c] = true
	}
	for _, e := range res.Events {
		if !seen[e.Client] {
			seen[e.Client] = true
			lanes = append(lanes, e.Client)
		}
	}
	return lanes
}

// buildTimeline draws res on a time axis from 0 to its duration, or to its
// last event when that comes later.
func buildTimeline(res *Result) svgView {
	lanes := laneOrder(res)
	extent := res.Duration
	for _, e := range res.Events {
		extent = max(extent, e.At)
	}
	if extent <= 0 {
		extent = time.Millisecond
	}
	plotW := float64(svgWidth - laneLeft - laneRight)
	xOf := func(at time.Duration) float64 {
		at = min(max(at, 0), extent)
		return laneLeft + plotW*float64(at)/float64(extent)
	}

	nLanes := max(len(lanes), 1)
	axisY := laneTop + nLanes*laneHeight
	v := svgView{
		Story:      res.Story,
		Mode:       res.Mode,
		Width:      svgWidth,
		Height:     axisY + axisHeight,
		AxisY:      svgNum(float64(axisY)),
		AxisY2:     svgNum(float64(axisY + 5)),
		AxisLabelY: svgNum(float64(axisY + 18)),
		GridTop:    svgNum(laneTop),
		X0:         svgNum(laneLeft),
		X1:         svgNum(laneLeft + plotW),
		Empty:      len(res.Events) == 0,
		EmptyX:     svgNum(laneLeft + plotW/2),
		EmptyY:     svgNum(float64(laneTop) + float64(nLanes*laneHeight)/2 + 4),
	}
	for _, t := range axisTicks(extent) {
		v.Ticks = append(v.Ticks, tickView{X: svgNum(xOf(t)), Label: strconv.FormatFloat(float64(t)/float64(time.Millisecond), 'f', -1, 64)})
	}

	byClient := map[string][]Event{}
	for _, e := range res.Events {
		byClient[e.Client] = append(byClient[e.Client], e)
	}
	for i, c := range lanes {
		y0 := float64(laneTop + i*laneHeight)
		label := c
		if label == "" {
			label = "(none)"
		}
		if utf8.RuneCountInString(label) > labelRunes {
			label = string([]rune(label)[:labelRunes-1]) + "…"
		}
		evs := byClient[c]
		slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
		v.Lanes = append(v.Lanes, laneView{
			Client: c,
			Label:  label,
			Odd:    i%2 == 1,
			Y:      svgNum(y0),
			H:      svgNum(laneHeight),
			LabelY: svgNum(y0 + laneHeight/2 + 4),
			Shapes: laneShapes(c, evs, y0+laneHeight/2, extent, xOf),
		})
	}
	return v
}

// axisTicks returns tick times from 0 to extent at a step of 1, 2 or 5
// times a power of ten milliseconds, about eight of them.
func axisTicks(extent time.Duration) []time.Duration {
	ms := float64(extent) / float64(time.Millisecond)
	raw := ms / 8
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, f := range []float64{1, 2, 5, 10} {
		step = f * p
		if step >= raw {
			break
		}
	}
	var ts []time.Duration
	for t := 0.0; t <= ms*(1+1e-9); t += step {
		ts = append(ts, time.Duration(math.Round(t*float64(time.Millisecond))))
		if len(ts) > 50 {
			break
		}
	}
	return ts
}

// eventTip is the tooltip of one event.
func eventTip(client string, e Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s at %s", client, e.Kind, msLabel(e.At))
	if e.Token != 0 {
		fmt.Fprintf(&b, ", token %d", e.Token)
	}
	if e.Value != nil {
		fmt.Fprintf(&b, ", value %d", *e.Value)
	}
	if e.Stale {
		b.WriteString(", STALE")
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// laneShapes draws one client's events (sorted by time) on a lane whose
// middle is at cy: pauses first, as a hatched band behind the lease, then
// the other spans, then the marks on top of them.
func laneShapes(client string, evs []Event, cy float64, extent time.Duration, xOf func(time.Duration) float64) []svgShape {
	var spans, marks []svgShape
	above, below := labelRow{y: cy - 16}, labelRow{y: cy + 25}
	span := func(class string, from, to time.Duration, top, h float64, t string) {
		x0, x1 := xOf(from), xOf(to)
		spans = append(spans, svgShape{El: "rect", Class: class, X: svgNum(x0), Y: svgNum(top), W: svgNum(max(x1-x0, 1)), H: svgNum(h), Tip: t})
	}
	const none = time.Duration(-1)
	var (
		waitAt, grantAt, expiredAt, pauseAt = none, none, none, none
		grantTok                            uint64
		pauses                              []svgShape
	)
	leaseTip := func(from, to time.Duration, how string) string {
		s := fmt.Sprintf("%s held the lease from %s to %s", client, msLabel(from), msLabel(to))
		if grantTok != 0 {
			s += fmt.Sprintf(" (token %d)", grantTok)
		}
		return s + how
	}
	for _, e := range evs {
		at := max(e.At, 0)
		x := xOf(at)
		mark := func(s svgShape) {
			s.At = strconv.FormatFloat(float64(at)/float64(time.Millisecond), 'f', -1, 64)
			s.Kind = string(e.Kind)
			s.Tip = eventTip(client, e)
			marks = append(marks, s)
		}
		switch e.Kind {
		case Acquire:
			if waitAt == none {
				waitAt = at
			}
			mark(svgShape{El: "line", Class: "acquire", X1: svgNum(x), Y1: svgNum(cy - 6), X2: svgNum(x), Y2: svgNum(cy + 6)})
		case Grant:
			if waitAt != none && at > waitAt {
				spans = append(spans, svgShape{El: "line", Class: "wait", X1: svgNum(xOf(waitAt)), Y1: svgNum(cy), X2: svgNum(x), Y2: svgNum(cy),
					Tip: fmt.Sprintf("%s waited for the lock from %s to %s", client, msLabel(waitAt), msLabel(at))})
			}
			waitAt = none
			if grantAt != none {
				span("lease", grantAt, at, cy-8, 16, leaseTip(grantAt, at, ""))
			}
			grantAt, grantTok, expiredAt = at, e.Token, none
			mark(svgShape{El: "line", Class: "grant-tick", X1: svgNum(x), Y1: svgNum(cy - 8), X2: svgNum(x), Y2: svgNum(cy + 8)})
			if e.Token != 0 {
				above.add(x, "#"+strconv.FormatUint(e.Token, 10), "lbl grant", &e)
			}
		case Renew:
			mark(svgShape{El: "line", Class: "renew", X1: svgNum(x), Y1: svgNum(cy - 11), X2: svgNum(x), Y2: svgNum(cy + 11)})
		case Expire:
			if grantAt != none {
				span("lease", grantAt, at, cy-8, 16, leaseTip(grantAt, at, ", until it expired"))
				grantAt = none
			}
			expiredAt = at
			mark(svgShape{El: "path", Class: "expire", D: fmt.Sprintf("M%s %sL%s %sM%s %sL%s %s",
				svgNum(x-6), svgNum(cy-6), svgNum(x+6), svgNum(cy+6), svgNum(x-6), svgNum(cy+6), svgNum(x+6), svgNum(cy-6))})
		case Release:
			if grantAt != none {
				span("lease", grantAt, at, cy-8, 16, leaseTip(grantAt, at, ", then released it"))
				grantAt = none
			} else if expiredAt != none {
				spans = append(spans, svgShape{El: "rect", Class: "believed", X: svgNum(xOf(expiredAt)), Y: svgNum(cy - 8),
					W: svgNum(max(x-xOf(expiredAt), 1)), H: "16",
					Tip: fmt.Sprintf("%s's lease had expired at %s but it went on as the holder until it released at %s",
						client, msLabel(expiredAt), msLabel(at))})
			}
			expiredAt = none
			mark(svgShape{El: "line", Class: "release", X1: svgNum(x), Y1: svgNum(cy - 10), X2: svgNum(x), Y2: svgNum(cy + 10)})
		case Pause:
			if pauseAt == none {
				pauseAt = at
			}
			mark(svgShape{El: "line", Class: "pause-edge", X1: svgNum(x), Y1: svgNum(cy - 13), X2: svgNum(x), Y2: svgNum(cy + 13)})
		case Resume:
			from := pauseAt
			if from == none {
				from = 0
			}
			pauses = append(pauses, svgShape{El: "rect", Class: "paused", X: svgNum(xOf(from)), Y: svgNum(cy - 13),
				W: svgNum(max(x-xOf(from), 1)), H: "26",
				Tip: fmt.Sprintf("%s was paused from %s to %s", client, msLabel(from), msLabel(at))})
			pauseAt = none
			mark(svgShape{El: "line", Class: "pause-edge", X1: svgNum(x), Y1: svgNum(cy - 13), X2: svgNum(x), Y2: svgNum(cy + 13)})
		case Fault:
			mark(svgShape{El: "path", Class: "fault", D: fmt.Sprintf("M%s %sV%sM%s %sl5 -8h-10z",
				svgNum(x), svgNum(cy-28), svgNum(cy+28), svgNum(x), svgNum(cy-20))})
		case Read:
			mark(svgShape{El: "circle", Class: "read", CX: svgNum(x), CY: svgNum(cy), R: "5"})
			if e.Value != nil {
				above.add(x, "r "+strconv.FormatInt(*e.Value, 10), "lbl", nil)
			}
		case WriteAccepted, WriteRejected:
			class := "write ok"
			switch {
			case e.Kind == WriteRejected:
				class = "write rejected"
				marks = append(marks, svgShape{El: "circle", Class: "halo good", CX: svgNum(x), CY: svgNum(cy), R: "17"})
			case e.Stale:
				class = "write stale-accepted"
				marks = append(marks, svgShape{El: "circle", Class: "halo bad", CX: svgNum(x), CY: svgNum(cy), R: "17"})
			}
			if e.Stale {
				class += " stale"
			}
			mark(svgShape{El: "rect", Class: class, X: svgNum(x - 4), Y: svgNum(cy - 13), W: "8", H: "26"})
			if e.Value != nil {
				below.add(x, "w "+strconv.FormatInt(*e.Value, 10), "lbl", nil)
			}
		default: // Note and kinds this page does not know
			mark(svgShape{El: "circle", Class: "note", CX: svgNum(x), CY: svgNum(cy + 20), R: "3"})
		}
	}
	// Whatever is still open runs to the end of the timeline.
	if waitAt != none {
		spans = append(spans, svgShape{El: "line", Class: "wait", X1: svgNum(xOf(waitAt)), Y1: svgNum(cy), X2: svgNum(xOf(extent)), Y2: svgNum(cy),
			Tip: fmt.Sprintf("%s waited for the lock from %s to the end", client, msLabel(waitAt))})
	}
	if grantAt != none {
		span("lease", grantAt, extent, cy-8, 16, leaseTip(grantAt, extent, ", to the end"))
	}
	if pauseAt != none {
		pauses = append(pauses, svgShape{El: "rect", Class: "paused", X: svgNum(xOf(pauseAt)), Y: svgNum(cy - 13),
			W: svgNum(max(xOf(extent)-xOf(pauseAt), 1)), H: "26",
			Tip: fmt.Sprintf("%s was paused from %s to the end", client, msLabel(pauseAt))})
	}
	out := append(pauses, spans...)
	out = append(out, marks...)
	out = append(out, above.shapes...)
	return append(out, below.shapes...)
}

// labelRow places the small text labels of one row of a lane (the values
// read above the line, written below it) left to right, each moved right
// as far as it must not to cover the one before, and dropped when that is
// too far from its mark (its tooltip still has the value).
type labelRow struct {
	y      float64
	right  float64 // right edge of the last label placed
	shapes []svgShape
}

// add places text centred on x if it can. A label of a mark (a grant's
// token) carries its event's data-at and data-kind when ev is not nil.
func (r *labelRow) add(x float64, text, class string, ev *Event) {
	const charW, gap, maxShift = 6, 3, 40
	w := float64(utf8.RuneCountInString(text)) * charW
	left := x - w/2
	if len(r.shapes) > 0 && left < r.right+gap {
		left = r.right + gap
	}
	if left-(x-w/2) > maxShift {
		return
	}
	r.right = left + w
	s := svgShape{El: "text", Class: class, X: svgNum(left + w/2), Y: svgNum(r.y), Anchor: "middle", Text: text}
	if ev != nil {
		s.At = strconv.FormatFloat(float64(max(ev.At, 0))/float64(time.Millisecond), 'f', -1, 64)
		s.Kind = string(ev.Kind)
	}
	r.shapes = append(r.shapes, s)
}
