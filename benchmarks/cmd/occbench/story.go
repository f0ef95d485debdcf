package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/occkit/occkit/benchmarks/internal/backends"
	"github.com/occkit/occkit/benchmarks/internal/jsonfile"
	"github.com/occkit/occkit/benchmarks/story"
)

// runStory is `occbench story`: the outcome table to stdout, progress to
// os.Stderr. A mode whose server is not installed here is skipped with a
// note, as the lab skips backends. It returns the exit status: 0; 1 when a
// run failed, was interrupted, fenced or occ lost an update or accepted a
// stale write, or (with --require-servers) a mode was skipped; 2 for a
// usage error.
func runStory(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet("occbench story", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: occbench story [flags]\n\nThe lock stories: each story's fault injected for real, in each lock mode, on real servers.\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nstories: %s\nmodes:   %s\n", strings.Join(story.StoryNames(), ", "), strings.Join(story.ModeNames(), ", "))
	}
	var (
		storiesF = fs.String("stories", "", "comma-separated stories (default: all)")
		modesF   = fs.String("modes", "", "comma-separated lock modes (default: all)")
		outF     = fs.String("out", "", "directory for stories.json and stories.html")
		noStartF = fs.Bool("no-start", false, "never start servers: Redis, Redlock's, ZooKeeper and MariaDB only from OCCKIT_REDIS_URL, OCCKIT_REDLOCK_URLS, OCCKIT_ZK_ADDR, OCCKIT_MYSQL_DSN (etcd runs in process)")
		requireF = fs.Bool("require-servers", false, "fail (exit 1) when a mode is skipped because its server is missing, instead of skipping it with a note (for CI)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		return usage(fs, "arguments", fmt.Errorf("unexpected %q", fs.Args()))
	}
	stories, modes := list(*storiesF), list(*modesF)
	for _, s := range stories {
		if !slices.Contains(story.StoryNames(), s) {
			return usage(fs, "--stories", fmt.Errorf("unknown story %q", s))
		}
	}
	for _, m := range modes {
		if !slices.Contains(story.ModeNames(), m) {
			return usage(fs, "--modes", fmt.Errorf("unknown mode %q", m))
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	rep, err := story.Run(ctx, story.Config{
		Stories: stories, Modes: modes,
		Env:     backends.Env{StartServers: !*noStartF, Log: os.Stderr},
		Command: strings.TrimSpace("go run ./benchmarks/cmd/occbench story " + strings.Join(args, " ")),
		Progress: func(r story.Result) {
			what := r.Verdict
			if r.Err != "" {
				what = "ERROR: " + r.Err
			}
			fmt.Fprintf(os.Stderr, "occbench story: %s / %s (%v): %s\n", r.Story, r.Mode, r.Duration.Round(10*time.Millisecond), what)
		},
	})
	if rep == nil {
		fmt.Fprintln(os.Stderr, "occbench story:", err)
		return 1
	}
	status := 0
	if err := story.WriteMarkdown(stdout, rep); err != nil {
		fmt.Fprintln(os.Stderr, "occbench story:", err)
		status = 1
	}
	if *outF != "" {
		if err := writeStories(*outF, rep); err != nil {
			fmt.Fprintln(os.Stderr, "occbench story: writing results:", err)
			status = 1
		}
	}
	for _, sk := range rep.Skipped {
		fmt.Fprintf(os.Stderr, "occbench story: skipped mode %s: %s\n", sk.Mode, sk.Reason)
		if *requireF {
			status = 1
		}
	}
	if *requireF && len(rep.Skipped) > 0 {
		fmt.Fprintf(os.Stderr, "\noccbench story: !!! %d mode(s) skipped and --require-servers is set\n", len(rep.Skipped))
	}
	for _, p := range story.Problems(rep) {
		fmt.Fprintf(os.Stderr, "\noccbench story: !!! %s\n", p)
		status = 1
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "occbench story: interrupted; the results above are partial:", err)
		status = 1
	}
	fmt.Fprintf(os.Stderr, "occbench story: %d runs in %v\n", len(rep.Results), time.Since(started).Round(time.Second))
	return status
}

// writeStories writes DIR/stories.json and, through writePage,
// DIR/stories.html.
func writeStories(dir string, rep *story.Report) error {
	if err := jsonfile.Write(filepath.Join(dir, "stories.json"), rep); err != nil {
		return err
	}
	wrote, err := writePage(dir, rep)
	if err != nil {
		return err
	}
	files := "stories.json"
	if wrote {
		files += ", stories.html"
	}
	fmt.Fprintf(os.Stderr, "occbench story: wrote %s in %s\n", files, dir)
	return nil
}

// writePage writes DIR/stories.html, the visual report (story.WritePage),
// and says whether it did: the one place the page is drawn.
func writePage(dir string, rep *story.Report) (bool, error) {
	f, err := os.Create(filepath.Join(dir, "stories.html"))
	if err != nil {
		return false, err
	}
	werr := story.WritePage(f, rep)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr == nil, werr
}
