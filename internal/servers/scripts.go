package servers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// PostgresBinary is the server binary scripts/servers/postgres.sh runs.
const PostgresBinary = "/usr/lib/postgresql/15/bin/postgres"

// RedisBinary is the server binary scripts/servers/redis.sh runs.
const RedisBinary = "/usr/bin/redis-server"

// ErrNotInstalled reports that a server's binaries are missing: the lab
// starts servers from installed binaries only, it never installs one.
var ErrNotInstalled = errors.New("not installed")

// Script is a server started by one of the repository's
// scripts/servers/<name>.sh, run standalone.
type Script struct {
	// URL is the server's URL, as the script exports it.
	URL string
	// Exports holds every variable the script exported (`export
	// NAME=value` lines), URL's included: a script may start more than
	// one server (postgres.sh --replica exports the replica's URL too).
	Exports map[string]string
	stop    string
	restart string
}

// StartScript runs `bash scripts/servers/<name>.sh` standalone from the
// checkout at repoRoot. Such a script starts a throwaway server (127.0.0.1
// only, a free port, no durability) and prints `export <envVar>=<url>`
// and `stop: <command>`; Stop runs the command. The script's messages go
// to log. StartScript fails with ErrNotInstalled when binary is missing:
// the scripts would install the server, which takes minutes (`make test`
// does that once).
func StartScript(ctx context.Context, repoRoot, name, envVar, binary string, log io.Writer) (*Script, error) {
	return StartScriptArgs(ctx, repoRoot, name, envVar, binary, log)
}

// StartScriptArgs is StartScript passing args to the script (such as
// postgres.sh's --replica).
func StartScriptArgs(ctx context.Context, repoRoot, name, envVar, binary string, log io.Writer, args ...string) (*Script, error) {
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("%s: %s: %w (run `make test` once, or install it with apt-get)", name, binary, ErrNotInstalled)
	}
	script := filepath.Join(repoRoot, "scripts", "servers", name+".sh")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = withoutEnv(os.Environ(), envVar, "OCCKIT_RUN_DIR")
	var out bytes.Buffer
	cmd.Stdout = &out
	if log != nil {
		cmd.Stderr = log
	}
	runErr := cmd.Run()
	p := &Script{Exports: map[string]string{}}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "export "):
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
			if !ok {
				continue
			}
			p.Exports[k] = strings.Trim(v, `'"`)
			if k == envVar {
				p.URL = p.Exports[k]
			}
		case strings.HasPrefix(line, "stop: "):
			p.stop = strings.TrimPrefix(line, "stop: ")
		case strings.HasPrefix(line, "restart: "):
			p.restart = strings.TrimPrefix(line, "restart: ")
		}
	}
	if runErr != nil || p.URL == "" || p.stop == "" {
		if p.stop != "" {
			_ = p.Stop(context.Background())
		}
		return nil, fmt.Errorf("%s: %s did not start a server (%v); its output: %q", name, script, runErr, out.String())
	}
	return p, nil
}

// Stop stops the server and removes its directory.
func (p *Script) Stop(ctx context.Context) error {
	if p.stop == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-c", p.stop).CombinedOutput()
	if err != nil {
		return fmt.Errorf("stop: %v: %s", err, out)
	}
	p.stop = ""
	return nil
}

// ErrNoRestart reports a server whose script printed no restart command.
var ErrNoRestart = errors.New("the script gives no restart command")

// CanRestart reports whether the script printed a `restart: <command>`
// line (scripts/servers/postgres.sh and redis.sh do).
func (p *Script) CanRestart() bool { return p.restart != "" && p.stop != "" }

// Restart restarts the server with the script's restart command: the
// server stops (its clients' connections break), stays down for down
// (rounded to whole milliseconds; the command reads it from
// OCCKIT_RESTART_DOWN, in seconds), and starts again on the same port with
// its data. Restart returns when the server serves again, or fails with
// ErrNoRestart.
func (p *Script) Restart(ctx context.Context, down time.Duration) error {
	if !p.CanRestart() {
		return ErrNoRestart
	}
	ctx, cancel := context.WithTimeout(ctx, down+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", p.restart)
	cmd.Env = append(os.Environ(), fmt.Sprintf("OCCKIT_RESTART_DOWN=%.3f", down.Seconds()))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("restart: %v: %s", err, out)
	}
	return nil
}

// withoutEnv returns env without the named variables.
func withoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// RepoRoot finds the occkit checkout from dir upwards: the directory whose
// go.mod declares module github.com/occkit/occkit.
func RepoRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && slices.Contains(strings.Split(string(b), "\n"), "module github.com/occkit/occkit") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no occkit checkout above %s", dir)
		}
	}
}

// MariaDBBinary is the server binary scripts/servers/mariadb.sh runs.
const MariaDBBinary = "/usr/sbin/mariadbd"
