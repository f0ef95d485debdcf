package story

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium, which scripts/ensure-tools.sh
// installs for `make test`.
const chromiumPath = "/usr/bin/chromium"

// timelineState is what the browser shows of one story: the mode of its
// visible timeline and what that timeline draws.
type timelineState struct {
	Visible int    `json:"visible"` // visible timelines in the story
	Mode    string `json:"mode"`
	Lanes   int    `json:"lanes"`
	Red     int    `json:"red"`
	Green   int    `json:"green"`
	RedFill string `json:"redFill"`
	Hash    string `json:"hash"`
}

// timelineStateJS is a script that reads the timelineState of the story
// named %q.
const timelineStateJS = `(() => {
  const s = [...document.querySelectorAll("section.story")].find(x => x.dataset.story === %q);
  const vis = [...s.querySelectorAll("svg.timeline")].filter(x => x.getClientRects().length > 0);
  const svg = vis[0];
  const red = svg.querySelectorAll("g.lane .write.stale-accepted");
  return {
    visible: vis.length, mode: svg.dataset.mode,
    lanes: svg.querySelectorAll("g.lane").length,
    red: red.length, green: svg.querySelectorAll("g.lane .write.rejected").length,
    redFill: red.length ? getComputedStyle(red[0]).fill : "",
    hash: location.hash,
  };
})()`

// TestPageInChromium opens stories.html in headless Chromium: the page
// loads with no request but its own file and no script error, a mode
// button and a summary link switch the visible timeline, a "#story/mode"
// URL selects that timeline, and a screenshot of the whole page is saved
// (to $OCCKIT_STORY_SCREENSHOT when set).
func TestPageInChromium(t *testing.T) {
	pageURL := writePageFile(t, pageSampleReport())
	actx := startChromium(t)
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	// Collect what the page should never do: fetch anything but itself,
	// throw, or log an error (a CSP violation is logged as one).
	var (
		mu       sync.Mutex
		problems []string
	)
	watch := func(tctx context.Context) {
		t.Helper()
		err := chromedp.Listen(tctx, func(ev any) {
			var p string
			switch ev := ev.(type) {
			case *network.EventRequestWillBeSent:
				if u := ev.Request.URL; !strings.HasPrefix(u, "file://") && !strings.HasPrefix(u, "data:") {
					p = "request for " + u
				}
			case *runtime.EventExceptionThrown:
				p = "exception: " + ev.ExceptionDetails.Text
				if ex := ev.ExceptionDetails.Exception; ex != nil {
					p += " " + ex.Description
				}
			case *runtime.EventConsoleAPICalled:
				if ev.Type == runtime.ConsoleAPICalledTypeError {
					p = "console.error"
				}
			case *log.EventEntryAdded:
				if ev.Entry.Level == log.EntryLevelError {
					p = "log: " + ev.Entry.Text
				}
			}
			if p != "" {
				mu.Lock()
				problems = append(problems, p)
				mu.Unlock()
			}
		})
		if err != nil {
			t.Fatalf("starting Chromium: %v", err)
		}
	}
	state := func(tctx context.Context, story string) timelineState {
		t.Helper()
		s, err := chromedp.Run(tctx, chromedp.Evaluate[timelineState](fmt.Sprintf(timelineStateJS, story)))
		if err != nil {
			t.Fatalf("reading the %s timeline: %v", story, err)
		}
		return s
	}

	start := time.Now()
	watch(bctx)
	t.Logf("Chromium started in %v", time.Since(start).Round(time.Millisecond))
	if err := chromedp.Do(bctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("opening %s: %v", pageURL, err)
	}
	title, err := chromedp.Run(bctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if title != "occkit lock stories" {
		t.Errorf("title %q", title)
	}
	js, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.classList.contains("js")`))
	if err != nil || !js {
		t.Fatalf("the page's script did not run (blocked by its own CSP?): %v", err)
	}

	// The first mode shows first: A's stale write accepted, in red.
	s := state(bctx, "gc-pause")
	if s.Visible != 1 || s.Mode != "redis" || s.Lanes != 2 || s.Red != 1 || s.Green != 0 {
		t.Errorf("on load: %+v, want one visible timeline, redis, 2 lanes, 1 red mark", s)
	}
	if s.RedFill != "rgb(214, 39, 40)" {
		t.Errorf("the accepted stale write is filled %q, want red", s.RedFill)
	}

	// The fenced button: the stale write rejected, in green.
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`section.story[data-story="gc-pause"] .switch button[data-mode="fenced"]`))); err != nil {
		t.Fatalf("clicking fenced: %v", err)
	}
	s = state(bctx, "gc-pause")
	if s.Visible != 1 || s.Mode != "fenced" || s.Lanes != 2 || s.Red != 0 || s.Green != 1 {
		t.Errorf("after clicking fenced: %+v, want fenced, 2 lanes, 0 red, 1 green", s)
	}
	if s.Hash != "#gc-pause/fenced" {
		t.Errorf("after clicking fenced the URL's fragment is %q, want #gc-pause/fenced", s.Hash)
	}
	if other := state(bctx, "partition"); other.Mode != "redis" {
		t.Errorf("switching gc-pause switched partition too: %+v", other)
	}

	// A summary cell goes back to redis.
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`a.cell[data-story="gc-pause"][data-mode="redis"]`))); err != nil {
		t.Fatalf("clicking the summary cell: %v", err)
	}
	if s = state(bctx, "gc-pause"); s.Mode != "redis" || s.Red != 1 {
		t.Errorf("after clicking the gc-pause/redis summary cell: %+v", s)
	}

	// A linked timeline, in a new tab.
	tab, tcancel := chromedp.NewContext(bctx)
	defer tcancel()
	watch(tab)
	if err := chromedp.Do(tab, chromedp.Navigate(pageURL+"#gc-pause/occ")); err != nil {
		t.Fatalf("opening #gc-pause/occ: %v", err)
	}
	if s = state(tab, "gc-pause"); s.Visible != 1 || s.Mode != "occ" || s.Red != 0 || s.Green != 1 {
		t.Errorf("at #gc-pause/occ: %+v, want occ, 0 red, 1 green", s)
	}
	if s = state(tab, "contention"); s.Mode != "redis" || s.Lanes != 3 {
		t.Errorf("at #gc-pause/occ, contention shows %+v, want redis with 3 lanes", s)
	}

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	out := os.Getenv("OCCKIT_STORY_SCREENSHOT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "stories.png")
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", out)
	checkScreenshot(t, shot)

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("the page in Chromium: %s", p)
	}
}

// checkScreenshot checks that shot is a PNG with something drawn on it,
// the red of an accepted stale write among it.
func checkScreenshot(t *testing.T, shot []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	r := img.Bounds()
	if r.Dx() < 600 || r.Dy() < 600 {
		t.Errorf("the screenshot is %dx%d, want a whole page", r.Dx(), r.Dy())
	}
	colours := map[[3]uint32]bool{}
	red := 0
	for y := r.Min.Y; y < r.Max.Y; y += 2 {
		for x := r.Min.X; x < r.Max.X; x += 2 {
			c := pixelRGB(img, x, y)
			colours[c] = true
			if nearRGB(c, [3]uint32{214, 39, 40}) {
				red++
			}
		}
	}
	if len(colours) < 16 {
		t.Errorf("the screenshot has %d colours: nothing drawn", len(colours))
	}
	if red == 0 {
		t.Errorf("the screenshot has no red of an accepted stale write")
	}
}

func pixelRGB(img image.Image, x, y int) [3]uint32 {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]uint32{r >> 8, g >> 8, b >> 8}
}

func nearRGB(a, b [3]uint32) bool {
	d := func(x, y uint32) uint32 {
		if x > y {
			return x - y
		}
		return y - x
	}
	return d(a[0], b[0]) < 8 && d(a[1], b[1]) < 8 && d(a[2], b[2]) < 8
}

// writePageFile writes the page of r into a temporary directory and
// returns its file:// URL.
func writePageFile(t *testing.T, r *Report) string {
	t.Helper()
	dir := t.TempDir()
	page := filepath.Join(dir, "stories.html")
	var b bytes.Buffer
	if err := WritePage(&b, r); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return (&url.URL{Scheme: "file", Path: page}).String()
}

// startChromium starts headless Chromium for the test (it fails loudly
// when Chromium is missing) and returns its allocator context, which ends
// with the test.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	exe := chromiumPath
	if _, err := os.Stat(exe); err != nil {
		p, lerr := exec.LookPath("chromium")
		if lerr != nil {
			t.Fatalf("Chromium is missing (%v): the lock-story page is tested in a real browser. "+
				"Install Debian's package with `apt-get install -y --no-install-recommends chromium`, "+
				"or run `make test`, whose scripts/ensure-tools.sh installs it", err)
		}
		exe = p
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.WindowSize(1200, 900),
	)
	t.Cleanup(acancel)
	return actx
}

// checkRunInChromium opens the page of a real run in Chromium and checks,
// for every story and mode, that the timeline the mode switch shows is
// that mode's and draws its outcome: as many red marks (stale writes
// accepted) and green marks (stale writes rejected) as the run counted.
func checkRunInChromium(t *testing.T, r *Report) {
	t.Helper()
	pageURL := writePageFile(t, r)
	bctx, cancel := chromedp.NewContext(startChromium(t))
	defer cancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("opening the page of the run: %v", err)
	}
	for _, res := range r.Results {
		sel := fmt.Sprintf(`section.story[data-story=%q] .switch button[data-mode=%q]`, res.Story, res.Mode)
		if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
			t.Fatalf("clicking %s/%s: %v", res.Story, res.Mode, err)
		}
		s, err := chromedp.Run(bctx, chromedp.Evaluate[timelineState](fmt.Sprintf(timelineStateJS, res.Story)))
		if err != nil {
			t.Fatalf("reading the %s timeline: %v", res.Story, err)
		}
		o := res.Outcome
		if s.Visible != 1 || s.Mode != res.Mode || s.Lanes != len(res.Clients) || s.Red != o.StaleAccepted || s.Green != o.StaleRejected {
			t.Errorf("%s/%s in Chromium: %+v, want that mode, %d lanes, %d red, %d green",
				res.Story, res.Mode, s, len(res.Clients), o.StaleAccepted, o.StaleRejected)
		}
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if out := os.Getenv("OCCKIT_STORY_SCREENSHOT"); out != "" {
		out = strings.TrimSuffix(out, ".png") + "-run.png"
		if err := os.WriteFile(out, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of the run: %s", out)
	}
	checkScreenshot(t, shot)
}
