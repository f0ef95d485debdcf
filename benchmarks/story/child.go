package story

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// EnvChild is the environment variable that makes ChildMain run the
// process as a story's child client (gc-pause's client A, which the
// runner stops with SIGSTOP): the runner re-executes its own binary with
// EnvChild=1.
const EnvChild = "OCCKIT_STORY_CHILD"

// ChildMain runs this process as a story's child client and exits, when
// EnvChild is set; otherwise it returns at once. A binary that calls Run
// must call ChildMain first thing in main (occbench does), and a test
// binary first thing in TestMain.
//
// The child reads its part on its first line of input (JSON: the run, its
// lane and its endpoints), makes one sale, writes its events and steps to
// stdout as JSON lines, and waits for the runner's word on stdin where the
// story says so.
func ChildMain() {
	if os.Getenv(EnvChild) == "" {
		return
	}
	os.Exit(childMain(os.Stdin, os.Stdout))
}

// childSpec is what the runner tells a child on its first line.
type childSpec struct {
	Run    runSpec         `json:"run"`
	Client string          `json:"client"`
	EP     clientEndpoints `json:"endpoints"`
}

// childMsg is one line from a child to the runner.
type childMsg struct {
	Event *Event `json:"event,omitempty"`
	// Ref comes with a Grant event: the grant, for the runner's probe.
	Ref string `json:"ref,omitempty"`
	// Releasing: the child is about to release this grant; the runner
	// answers ACK.
	Releasing string `json:"releasing,omitempty"`
	// Held: the child asks whether this grant holds the lock now; the
	// runner answers HELD true or HELD false.
	Held string `json:"held,omitempty"`
	// Step: "hello" (started), "read" (read, now waits for GO), "done".
	Step string `json:"step,omitempty"`
	Err  string `json:"error,omitempty"`
}

// The child's steps and the runner's words.
const (
	stepHello = "hello"
	stepRead  = "read"
	stepDone  = "done"
	wordGo    = "GO"
	wordAck   = "ACK"
	wordHeld  = "HELD"
)

// childSink is a child's sink: JSON lines to the runner.
type childSink struct {
	mu    sync.Mutex
	enc   *json.Encoder
	lines chan string
}

func (s *childSink) send(m childMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.enc.Encode(m)
}

func (s *childSink) event(e Event)               { s.send(childMsg{Event: &e}) }
func (s *childSink) granted(e Event, ref string) { s.send(childMsg{Event: &e, Ref: ref}) }

func (s *childSink) releasing(ctx context.Context, ref string) error {
	s.send(childMsg{Releasing: ref})
	return s.await(ctx, wordAck)
}

func (s *childSink) held(ctx context.Context, ref string) (bool, error) {
	s.send(childMsg{Held: ref})
	l, err := s.next(ctx, wordHeld)
	switch {
	case err != nil:
		return false, err
	case l == wordHeld+" true":
		return true, nil
	case l == wordHeld+" false":
		return false, nil
	case strings.HasPrefix(l, wordHeld+" error "):
		return false, errors.New(strings.TrimPrefix(l, wordHeld+" error "))
	}
	return false, fmt.Errorf("the runner said %q, want %s", l, wordHeld)
}

// await waits for the runner's word.
func (s *childSink) await(ctx context.Context, word string) error {
	l, err := s.next(ctx, word)
	if err == nil && l != word {
		err = fmt.Errorf("the runner said %q, want %s", l, word)
	}
	return err
}

// next returns the runner's next line, which should be what; an error when
// the pipe closes first or ctx ends.
func (s *childSink) next(ctx context.Context, what string) (string, error) {
	select {
	case l, ok := <-s.lines:
		if !ok {
			return "", fmt.Errorf("the runner closed the pipe before saying %s", what)
		}
		return l, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func childMain(in io.Reader, out io.Writer) int {
	s := &childSink{enc: json.NewEncoder(out), lines: make(chan string, 8)}
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	s.send(childMsg{Step: stepHello})
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	fail := func(err error) int {
		s.send(childMsg{Err: err.Error()})
		return 1
	}
	line, err := s.next(ctx, "the spec")
	if err != nil {
		return fail(err)
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(line), &spec); err != nil {
		return fail(fmt.Errorf("reading the spec: %w", err))
	}
	r, err := openRun(ctx, spec.Run, s)
	if err != nil {
		return fail(err)
	}
	defer r.close()
	c, err := newClient(ctx, r, spec.Client, spec.EP)
	if err != nil {
		return fail(err)
	}
	defer c.close()
	err = c.sale(ctx, func(ctx context.Context, attempt int) error {
		if attempt > 1 {
			return nil
		}
		s.send(childMsg{Step: stepRead})
		return s.await(ctx, wordGo)
	})
	if err != nil {
		return fail(err)
	}
	s.send(childMsg{Step: stepDone})
	return 0
}

// childProc is a running child client, seen from the runner.
type childProc struct {
	name   string
	cmd    *exec.Cmd
	inMu   sync.Mutex
	stdin  io.WriteCloser
	steps  chan childMsg
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
	stderr lockedBuffer
}

// startChild starts client name of r as a child process: the current
// binary, run again with EnvChild set.
func (r *run) startChild(ctx context.Context, name string, ep clientEndpoints) (*childProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &childProc{name: name, steps: make(chan childMsg, 64), exited: make(chan struct{})}
	// -test.run=^$: a test binary that does not call ChildMain runs no
	// test; another binary refuses the flag. Either way it says no hello.
	p.cmd = exec.Command(exe, "-test.run=^$")
	p.cmd.Env = append(os.Environ(), EnvChild+"=1")
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		p.stdin.Close()
		return nil, err
	}
	if err := startTied(p.cmd, p.exited); err != nil {
		p.stdin.Close()
		return nil, fmt.Errorf("starting client %s: %w", name, err)
	}
	r.rec.lane(name)
	go p.read(stdout, r.rec)
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.await(hctx, stepHello); err != nil {
		p.kill()
		return nil, fmt.Errorf("%w: %v", errNoChild, err)
	}
	b, _ := json.Marshal(childSpec{Run: r.spec, Client: name, EP: ep})
	if err := p.send(string(b)); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// read takes the child's lines: events go to the recorder, releases are
// acknowledged, steps are queued for await.
func (p *childProc) read(stdout io.Reader, rec *recorder) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m childMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			p.steps <- childMsg{Err: fmt.Sprintf("unexpected output from client %s: %q", p.name, sc.Text())}
			continue
		}
		switch {
		case m.Event != nil && m.Ref != "":
			rec.granted(*m.Event, m.Ref)
		case m.Event != nil:
			rec.event(*m.Event)
		case m.Held != "":
			held, err := rec.held(context.Background(), m.Held)
			answer := fmt.Sprintf("%s %v", wordHeld, held)
			if err != nil {
				answer = wordHeld + " error " + strings.ReplaceAll(err.Error(), "\n", " ")
			}
			_ = p.send(answer)
		case m.Releasing != "":
			_ = rec.releasing(context.Background(), m.Releasing)
			_ = p.send(wordAck)
		default:
			p.steps <- m
		}
	}
	close(p.steps)
	p.err = p.cmd.Wait()
	close(p.exited)
}

// send writes a line to the child.
func (p *childProc) send(line string) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// await waits for the child's step.
func (p *childProc) await(ctx context.Context, step string) error {
	for {
		select {
		case m, ok := <-p.steps:
			if !ok {
				<-p.exited
				return fmt.Errorf("client %s exited (%v) before %q; its stderr: %s", p.name, p.err, step, p.stderr.tail())
			}
			if m.Err != "" {
				return fmt.Errorf("client %s: %s", p.name, m.Err)
			}
			if m.Step == step {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for client %s to say %q: %w", p.name, step, ctx.Err())
		}
	}
}

// finish waits for the child to say done and exit.
func (p *childProc) finish(ctx context.Context) error {
	if err := p.await(ctx, stepDone); err != nil {
		return err
	}
	p.stdin.Close()
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("client %s: %v; its stderr: %s", p.name, p.err, p.stderr.tail())
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kill ends the child, stopped or not, and waits for it.
func (p *childProc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.stdin.Close()
}

// lockedBuffer collects a child's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() < 64<<10 {
		b.b.Write(p)
	}
	return len(p), nil
}

func (b *lockedBuffer) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimSpace(b.b.String())
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
