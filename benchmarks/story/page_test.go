package story

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

func atMs(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
func valPtr(v int64) *int64        { return &v }

// gcPauseResult is the seed story as the runner records it: stock 10, two
// sales, A paused past its 300 ms TTL while B takes the lock and sells.
// stale is what happens to A's write after it resumes: accepted (no
// fencing), or rejected and retried (fencing, occ).
func gcPauseResult(mode string) Result {
	r := Result{Story: "gc-pause", Mode: mode, Clients: []string{"A", "B"}, Duration: atMs(700)}
	add := func(at float64, client string, k Kind, tok uint64, v *int64, stale bool, detail string) {
		r.Events = append(r.Events, Event{At: atMs(at), Client: client, Kind: k, Token: tok, Value: v, Stale: stale, Detail: detail})
	}
	tokA, tokB := uint64(0), uint64(0)
	if mode == "fenced" {
		tokA, tokB = 33, 34
	}
	if mode != "occ" {
		add(0, "A", Acquire, 0, nil, false, "")
		add(2, "A", Grant, tokA, nil, false, "SET NX PX 300")
	}
	add(5, "A", Read, tokA, valPtr(10), false, "stock")
	add(20, "A", Pause, 0, nil, false, "SIGSTOP (a stop-the-world GC pause)")
	if mode != "occ" {
		add(50, "B", Acquire, 0, nil, false, "")
		add(302, "A", Expire, tokA, nil, false, "TTL of 300 ms ran out while A was stopped")
		add(305, "B", Grant, tokB, nil, false, "")
	}
	add(310, "B", Read, tokB, valPtr(10), false, "stock")
	add(315, "B", WriteAccepted, tokB, valPtr(9), false, "sold one")
	if mode != "occ" {
		add(320, "B", Release, tokB, nil, false, "")
	}
	add(620, "A", Resume, 0, nil, false, "SIGCONT")
	switch mode {
	case "redis":
		add(625, "A", WriteAccepted, tokA, valPtr(9), true, "A still believed it held the lock")
		add(630, "A", Release, tokA, nil, false, "the lock was no longer held")
		r.Outcome = Outcome{Expected: 8, Final: 9, LostUpdates: 1, StaleAccepted: 1}
		r.Verdict = "lost 1 update: A's stale write of 9 was accepted after B's"
	case "fenced":
		add(625, "A", WriteRejected, tokA, valPtr(9), true, "token 33 < 34")
		add(627, "A", Release, tokA, nil, false, "the lock was no longer held")
		add(630, "A", Acquire, 0, nil, false, "")
		add(632, "A", Grant, 35, nil, false, "")
		add(635, "A", Read, 35, valPtr(9), false, "stock")
		add(640, "A", WriteAccepted, 35, valPtr(8), false, "sold one")
		add(645, "A", Release, 35, nil, false, "")
		r.Outcome = Outcome{Expected: 8, Final: 8, StaleRejected: 1, Blocked: atMs(257)}
		r.Verdict = "no update lost: A's stale write (token 33) was rejected, A retried"
		r.Safe = true
	case "occ":
		add(625, "A", WriteRejected, 0, valPtr(9), true, "version conflict")
		add(627, "A", Read, 0, valPtr(9), false, "stock")
		add(630, "A", WriteAccepted, 0, valPtr(8), false, "sold one")
		r.Outcome = Outcome{Expected: 8, Final: 8, StaleRejected: 1}
		r.Verdict = "no update lost: A's write from a stale read conflicted, A retried"
		r.Safe = true
	}
	return r
}

// pageSampleReport is a report as `occbench story` writes it: gc-pause in
// three modes, a partition story whose redis run failed and which has no
// occ run, and a contention story with renewals.
func pageSampleReport() *Report {
	contention := Result{Story: "contention", Mode: "redis", Clients: []string{"C1", "C2", "C3"}, Duration: atMs(90),
		Outcome: Outcome{Expected: 3, Final: 3, Blocked: atMs(60)}, Verdict: "no update lost", Safe: true}
	for i, c := range contention.Clients {
		at := float64(i) * 30
		contention.Events = append(contention.Events,
			Event{At: atMs(1), Client: c, Kind: Acquire},
			Event{At: atMs(at + 2), Client: c, Kind: Grant},
			Event{At: atMs(at + 10), Client: c, Kind: Renew, Detail: "watchdog"},
			Event{At: atMs(at + 20), Client: c, Kind: WriteAccepted, Value: valPtr(int64(i + 1))},
			Event{At: atMs(at + 25), Client: c, Kind: Release},
		)
	}
	return &Report{
		Started: time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC),
		Servers: []string{"Redis 7.0.15", "etcd 3.7.3"},
		Stories: []Info{
			{Name: "gc-pause", Title: "A GC pause past the TTL", About: "The holder is stopped past its lease; a second client takes the lock and sells."},
			{Name: "partition", Title: "A partition from the lock service", About: "The holder loses the lock service but keeps working."},
			{Name: "contention", Title: "Many clients on one key"},
		},
		Modes: []Info{
			{Name: "redis", Title: "Redis SET NX PX", About: "No fencing."},
			{Name: "fenced", Title: "Lock + fenced write"},
			{Name: "occ", Title: "No lock: conditional write and retry"},
		},
		Results: []Result{
			gcPauseResult("redis"), gcPauseResult("fenced"), gcPauseResult("occ"),
			{Story: "partition", Mode: "redis", Clients: []string{"A", "B"}, Err: "dial tcp 127.0.0.1:6379: connect: connection refused"},
			{Story: "partition", Mode: "fenced", Clients: []string{"A", "B"}, Duration: atMs(100), Safe: true, Verdict: "no update lost",
				Events: []Event{{At: atMs(10), Client: "A", Kind: Fault, Detail: "partition: proxy cut"}, {At: atMs(60), Client: "A", Kind: Fault, Detail: "partition healed"}}},
			contention,
		},
		Command: "go run ./benchmarks/cmd/occbench story --out /tmp/stories",
	}
}

func renderPage(t *testing.T, r *Report) (string, *html.Node) {
	t.Helper()
	var b bytes.Buffer
	if err := WritePage(&b, r); err != nil {
		t.Fatalf("WritePage: %v", err)
	}
	doc, err := html.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("parsing the page: %v", err)
	}
	return b.String(), doc
}

func htmlAttr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func hasClass(n *html.Node, class string) bool {
	c, _ := htmlAttr(n, "class")
	return slices.Contains(strings.Fields(c), class)
}

// findAll returns the elements under n (n included) named tag ("" for any)
// that have every one of classes.
func findAll(n *html.Node, tag string, classes ...string) []*html.Node {
	var out []*html.Node
	for d := range n.Descendants() {
		if d.Type != html.ElementNode || (tag != "" && d.Data != tag) {
			continue
		}
		ok := true
		for _, c := range classes {
			ok = ok && hasClass(d, c)
		}
		if ok {
			out = append(out, d)
		}
	}
	return out
}

func textOf(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

// tooltipOf is the text of n's own <title> child: its tooltip.
func tooltipOf(n *html.Node) string {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && c.Data == "title" {
			return textOf(c)
		}
	}
	return ""
}

// timelinesOf maps "story/mode" to its SVG.
func timelinesOf(t *testing.T, doc *html.Node) map[string]*html.Node {
	t.Helper()
	m := map[string]*html.Node{}
	for _, svg := range findAll(doc, "svg", "timeline") {
		s, _ := htmlAttr(svg, "data-story")
		md, _ := htmlAttr(svg, "data-mode")
		k := s + "/" + md
		if m[k] != nil {
			t.Errorf("two timelines for %s", k)
		}
		m[k] = svg
	}
	return m
}

func lanesOf(svg *html.Node) []string {
	var cs []string
	for _, g := range findAll(svg, "g", "lane") {
		c, _ := htmlAttr(g, "data-client")
		cs = append(cs, c)
	}
	return cs
}

func TestWritePageTimelines(t *testing.T) {
	r := pageSampleReport()
	_, doc := renderPage(t, r)
	tl := timelinesOf(t, doc)
	want := []string{"gc-pause/redis", "gc-pause/fenced", "gc-pause/occ", "partition/redis", "partition/fenced", "contention/redis"}
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range tl {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("timelines %v, want %v", got, want)
	}
	for _, res := range r.Results {
		svg := tl[res.Story+"/"+res.Mode]
		if got := lanesOf(svg); !slices.Equal(got, res.Clients) {
			t.Errorf("%s/%s: lanes %v, want one per client %v", res.Story, res.Mode, got, res.Clients)
		}
	}

	// Where a stale write was accepted there is exactly one red mark, on
	// A's lane at the time of the write, and no green one; where it was
	// rejected, the reverse.
	for _, c := range []struct {
		mode       string
		red, green int
	}{{"redis", 1, 0}, {"fenced", 0, 1}, {"occ", 0, 1}} {
		svg := tl["gc-pause/"+c.mode]
		red, green := findAll(svg, "rect", "write", "stale-accepted"), findAll(svg, "rect", "write", "rejected")
		if len(red) != c.red || len(green) != c.green {
			t.Errorf("gc-pause/%s: %d red and %d green writes, want %d and %d", c.mode, len(red), len(green), c.red, c.green)
		}
		for _, m := range append(red, green...) {
			if lane, _ := htmlAttr(m.Parent, "data-client"); lane != "A" {
				t.Errorf("gc-pause/%s: stale write mark on lane %q, want A", c.mode, lane)
			}
			if at, _ := htmlAttr(m, "data-at"); at != "625" {
				t.Errorf("gc-pause/%s: stale write mark at %s ms, want 625", c.mode, at)
			}
			if tip := tooltipOf(m); !strings.Contains(tip, "STALE") || !strings.Contains(tip, "value 9") {
				t.Errorf("gc-pause/%s: stale write tooltip %q lacks STALE and its value", c.mode, tip)
			}
		}
		// The other writes are neutral: B's sale, and A's retry.
		wantOK := map[string]int{"redis": 1, "fenced": 2, "occ": 2}[c.mode]
		if ok := findAll(svg, "rect", "write", "ok"); len(ok) != wantOK {
			t.Errorf("gc-pause/%s: %d neutral writes, want %d", c.mode, len(ok), wantOK)
		}
	}

	// A's lane under redis: its lease until the expiry, then a dashed span
	// while it still acts as the holder, and the pause hatched.
	a := findAll(tl["gc-pause/redis"], "g", "lane")[0]
	for _, class := range []string{"lease", "believed", "paused"} {
		if n := len(findAll(a, "rect", class)); n != 1 {
			t.Errorf("gc-pause/redis lane A: %d %s spans, want 1", n, class)
		}
	}
	if tip := tooltipOf(findAll(a, "rect", "paused")[0]); tip != "A was paused from 20 ms to 620 ms" {
		t.Errorf("pause tooltip %q", tip)
	}
	if n := len(findAll(tl["gc-pause/fenced"], "text", "grant")); n != 3 {
		t.Errorf("gc-pause/fenced: %d grant labels, want 3", n)
	}
	if got := findAll(tl["gc-pause/fenced"], "text", "grant")[0].FirstChild.Data; got != "#33" {
		t.Errorf("first fenced grant label %q, want #33", got)
	}
	if n := len(findAll(tl["contention/redis"], "line", "renew")); n != 3 {
		t.Errorf("contention: %d renewal ticks, want 3", n)
	}
	if n := len(findAll(tl["partition/fenced"], "path", "fault")); n != 2 {
		t.Errorf("partition/fenced: %d fault marks, want 2", n)
	}
	// The axis is in ms and ends at the duration.
	ticks := findAll(tl["gc-pause/redis"], "text", "tick")
	if len(ticks) < 5 || textOf(ticks[len(ticks)-2]) != "700" || textOf(ticks[len(ticks)-1]) != "time, ms" {
		var ts []string
		for _, n := range ticks {
			ts = append(ts, textOf(n))
		}
		t.Errorf("axis labels %q, want about 8 ending at 700 then the unit", ts)
	}
}

func TestWritePageSwitchAndSummary(t *testing.T) {
	r := pageSampleReport()
	_, doc := renderPage(t, r)

	stories := findAll(doc, "section", "story")
	if len(stories) != 3 {
		t.Fatalf("%d story sections, want 3", len(stories))
	}
	for _, s := range stories {
		name, _ := htmlAttr(s, "data-story")
		var modes []string
		for _, b := range findAll(s, "button") {
			m, _ := htmlAttr(b, "data-mode")
			modes = append(modes, m)
		}
		var visible []string
		for _, p := range findAll(s, "div", "pane") {
			if _, hidden := htmlAttr(p, "hidden"); !hidden {
				m, _ := htmlAttr(p, "data-mode")
				visible = append(visible, m)
			}
		}
		want := map[string][]string{"gc-pause": {"redis", "fenced", "occ"}, "partition": {"redis", "fenced"}, "contention": {"redis"}}[name]
		if !slices.Equal(modes, want) {
			t.Errorf("%s: switch %v, want %v (only the modes with a result)", name, modes, want)
		}
		if len(visible) != 1 || visible[0] != want[0] {
			t.Errorf("%s: visible panes %v, want only %s", name, visible, want[0])
		}
		if name == "partition" && !strings.Contains(textOf(s), "Not run in: occ.") {
			t.Errorf("partition does not say it was not run in occ")
		}
		if n := len(findAll(s, "ul", "legend")); n != 1 {
			t.Errorf("%s: %d legends, want 1", name, n)
		}
	}

	verdicts := map[string]*html.Node{}
	for _, p := range findAll(doc, "div", "pane") {
		s, _ := htmlAttr(p, "data-story")
		m, _ := htmlAttr(p, "data-mode")
		if v := findAll(p, "p", "verdict"); len(v) > 0 {
			verdicts[s+"/"+m] = v[len(v)-1]
		}
		if s == "partition" && m == "redis" {
			if e := findAll(p, "pre", "err"); len(e) != 1 || !strings.Contains(textOf(e[0]), "connection refused") {
				t.Errorf("partition/redis does not show its error")
			}
		}
	}
	for k, class := range map[string]string{"gc-pause/redis": "unsafe", "gc-pause/fenced": "safe", "gc-pause/occ": "safe", "partition/redis": "error"} {
		v := verdicts[k]
		if v == nil || !hasClass(v, class) {
			t.Errorf("%s: verdict not styled %s", k, class)
		}
	}
	if got := textOf(verdicts["gc-pause/redis"]); !strings.Contains(got, "lost 1 update") {
		t.Errorf("gc-pause/redis verdict %q", got)
	}

	// The summary: a row per story, a cell per mode, linking to the
	// timeline, with lost / accepted / rejected.
	cells := map[string]string{}
	for _, a := range findAll(doc, "a", "cell") {
		href, _ := htmlAttr(a, "href")
		cells[href] = textOf(a)
	}
	for href, want := range map[string]string{
		"#gc-pause/redis":  "1 / 1 / 0",
		"#gc-pause/fenced": "0 / 0 / 1",
		"#gc-pause/occ":    "0 / 0 / 1",
		"#partition/redis": "error",
	} {
		if cells[href] != want {
			t.Errorf("summary cell %s = %q, want %q", href, cells[href], want)
		}
	}
	if len(cells) != 6 {
		t.Errorf("%d summary links, want 6 (one per result)", len(cells))
	}
	if n := len(findAll(doc, "td", "missing")); n != 3 {
		t.Errorf("%d summary cells marked missing, want 3", n)
	}
}

func TestWritePageSelfContained(t *testing.T) {
	page, doc := renderPage(t, pageSampleReport())
	for _, s := range []string{"http://", "https://", "//cdn", "@import", "@font-face"} {
		if strings.Contains(page, s) {
			t.Errorf("the page mentions %q; it must load nothing", s)
		}
	}
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		switch n.Data {
		case "link", "img", "iframe", "object", "embed", "image", "use":
			t.Errorf("the page has a <%s> element", n.Data)
		}
		for _, a := range n.Attr {
			if a.Key == "src" || a.Key == "xlink:href" || (a.Key == "href" && !strings.HasPrefix(a.Val, "#")) {
				t.Errorf("<%s %s=%q> refers to a resource", n.Data, a.Key, a.Val)
			}
		}
	}
	if n := len(findAll(doc, "script")); n != 1 {
		t.Errorf("%d scripts, want 1 inline", n)
	}
	var csp string
	for _, m := range findAll(doc, "meta") {
		if v, _ := htmlAttr(m, "http-equiv"); v == "Content-Security-Policy" {
			csp, _ = htmlAttr(m, "content")
		}
	}
	if !strings.HasPrefix(csp, "default-src 'none';") || !strings.Contains(csp, "script-src 'sha256-") {
		t.Errorf("the page's Content-Security-Policy %q does not forbid fetches", csp)
	}
	if !strings.Contains(page, "<script>"+pageScript+"</script>") {
		t.Errorf("the script is not written as is: its CSP hash would not match")
	}
}

func TestWritePageEscapes(t *testing.T) {
	const hostile = `</script><script>alert(1)</script>`
	const client = `<marquee onmouseover="alert(2)">A</marquee>`
	const story = `x" onclick="alert(3)`
	r := &Report{
		Servers: []string{`<img src=x onerror=alert(4)>`},
		Stories: []Info{{Name: story, Title: hostile, About: hostile}},
		Modes:   []Info{{Name: "m'<", Title: hostile}},
		Results: []Result{{
			Story: story, Mode: "m'<", Clients: []string{client}, Duration: atMs(10),
			Events:  []Event{{At: atMs(5), Client: client, Kind: WriteAccepted, Stale: true, Value: valPtr(1), Detail: hostile}},
			Verdict: hostile, Err: hostile,
		}},
		Command: hostile,
	}
	page, doc := renderPage(t, r)
	if n := len(findAll(doc, "script")); n != 1 {
		t.Fatalf("%d script elements, want the page's one", n)
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img") || strings.Contains(page, "<marquee") {
		t.Errorf("markup from the data reached the page unescaped")
	}
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		if n.Data == "img" || n.Data == "marquee" {
			t.Errorf("the data made a <%s> element", n.Data)
		}
		for _, a := range n.Attr {
			if strings.HasPrefix(a.Key, "on") {
				t.Errorf("the data made an attribute %s on <%s>", a.Key, n.Data)
			}
		}
	}
	// The data is there, as text.
	red := findAll(findAll(doc, "svg", "timeline")[0], "rect", "stale-accepted")
	if len(red) != 1 || !strings.Contains(tooltipOf(red[0]), hostile) {
		t.Errorf("the hostile detail is not in the tooltip as text")
	}
	if got := lanesOf(findAll(doc, "svg", "timeline")[0]); !slices.Equal(got, []string{client}) {
		t.Errorf("lane %q, want %q", got, client)
	}
	if s := findAll(doc, "section", "story"); len(s) != 1 {
		t.Errorf("%d story sections", len(s))
	} else if got, _ := htmlAttr(s[0], "data-story"); got != story {
		t.Errorf("data-story %q, want %q", got, story)
	}
}

func TestWritePageEdgeCases(t *testing.T) {
	r := &Report{
		Stories: []Info{{Name: "empty"}, {Name: "never-run"}},
		Modes:   []Info{{Name: "redis"}},
		Results: []Result{
			// Zero duration, no events, no clients.
			{Story: "empty", Mode: "redis"},
			// A story and a mode the lists lack; events past the duration,
			// before the start, for a client not listed; a lease and a
			// pause that never end; an unknown kind.
			{Story: "stray", Mode: "etcd", Clients: []string{"A"}, Duration: atMs(10), Events: []Event{
				{At: atMs(-1), Client: "A", Kind: Grant, Token: 7},
				{At: atMs(5), Client: "A", Kind: Pause},
				{At: atMs(40), Client: "Z", Kind: "teleport"},
			}},
			// A second result for the same story and mode is not drawn.
			{Story: "empty", Mode: "redis", Clients: []string{"X", "Y"}},
		},
	}
	_, doc := renderPage(t, r)
	tl := timelinesOf(t, doc)
	if len(tl) != 2 {
		t.Fatalf("%d timelines, want 2", len(tl))
	}
	empty := tl["empty/redis"]
	if empty == nil || len(lanesOf(empty)) != 0 || !strings.Contains(textOf(empty), "no events recorded") {
		t.Errorf("the empty result is not drawn as an empty timeline")
	}
	stray := tl["stray/etcd"]
	if stray == nil {
		t.Fatal("a result whose story and mode are not listed is not drawn")
	}
	if got := lanesOf(stray); !slices.Equal(got, []string{"A", "Z"}) {
		t.Errorf("lanes %v, want A then the unlisted Z", got)
	}
	lease, paused := findAll(stray, "rect", "lease"), findAll(stray, "rect", "paused")
	if len(lease) != 1 || len(paused) != 1 {
		t.Fatalf("%d leases and %d pauses, want 1 each, open to the end", len(lease), len(paused))
	}
	if x, _ := htmlAttr(lease[0], "x"); x != "96" {
		t.Errorf("a lease granted before the start begins at x=%s, want the axis start 96", x)
	}
	if n := len(findAll(stray, "circle", "note")); n != 1 {
		t.Errorf("an unknown kind is not drawn as a note")
	}
	for _, s := range findAll(doc, "section", "story") {
		if name, _ := htmlAttr(s, "data-story"); name == "never-run" && !strings.Contains(textOf(s), "No results") {
			t.Errorf("a story without results does not say so")
		}
	}
	if err := WritePage(&bytes.Buffer{}, nil); err == nil {
		t.Errorf("WritePage(nil) did not fail")
	}
}

func TestReadReport(t *testing.T) {
	want := pageSampleReport()
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("ReadReport: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadReport(json.Marshal(r)) differs from r")
	}
	var p1, p2 bytes.Buffer
	if err := WritePage(&p1, want); err != nil {
		t.Fatal(err)
	}
	if err := WritePage(&p2, got); err != nil {
		t.Fatal(err)
	}
	if p1.String() != p2.String() {
		t.Errorf("the page from stories.json differs from the page from the run")
	}
	if _, err := ReadReport(strings.NewReader("<html>")); err == nil {
		t.Errorf("ReadReport accepted something that is not JSON")
	}
}

func TestAxisTicks(t *testing.T) {
	for _, extent := range []time.Duration{time.Microsecond, time.Millisecond, atMs(7), atMs(700), atMs(1234), 10 * time.Second, time.Hour} {
		ts := axisTicks(extent)
		if len(ts) < 4 || len(ts) > 11 || ts[0] != 0 || ts[len(ts)-1] > extent {
			t.Errorf("axisTicks(%v) = %v", extent, ts)
		}
	}
}
