package story

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/benchmarks/internal/lab"
)

// Config says which stories to run in which modes, and how to reach or
// start their servers.
type Config struct {
	// Stories and Modes name what to run (default: every story, every
	// mode), in the order given.
	Stories, Modes []string
	// Env is how servers are reached or started, as the lab does it:
	// OCCKIT_REDIS_URL, OCCKIT_REDLOCK_URLS, OCCKIT_ZK_ADDR and
	// OCCKIT_MYSQL_DSN (read with Env.Getenv) name servers to use; without
	// them, and with Env.StartServers, throwaway servers are started
	// (Redis with scripts/servers/redis.sh, ZooKeeper from Debian's
	// package, MariaDB with scripts/servers/mariadb.sh, etcd in process)
	// and stopped before Run returns.
	Env lab.Env
	// Command is the command line that reproduces the run, for the report.
	Command string
	// Progress, when set, is called after each story run.
	Progress func(Result)
}

// runTimeout bounds one story in one mode.
const runTimeout = 2 * time.Minute

// Run runs every chosen story in every chosen mode, one after the other,
// against real servers, and returns the report. A mode whose servers are
// not installed or cannot be reached here is not run: it is listed in
// Report.Skipped with the reason (the caller decides whether that is an
// error). A run that fails (a client that errs) has Result.Err set and
// the others go on. Run fails only for an unknown story or mode, when
// the servers cannot be opened or started, or when ctx ends (it then
// returns the partial report too).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	sts, ms, err := choose(cfg.Stories, cfg.Modes)
	if err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now(), Command: cfg.Command}
	for _, s := range sts {
		rep.Stories = append(rep.Stories, s.Info)
	}
	for _, m := range ms {
		rep.Modes = append(rep.Modes, m.Info)
	}
	srv, err := openServers(ctx, cfg.Env, ms)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := srv.lab.Close(cctx); err != nil {
			fmt.Fprintf(logOf(cfg.Env), "story: stopping servers: %v\n", err)
		}
	}()
	rep.Servers = srv.servers
	var b [4]byte
	_, _ = rand.Read(b[:])
	runID := hex.EncodeToString(b[:])
	var runnable []modeSpec
	for _, m := range ms {
		if why := srv.unavailable(m); why != "" {
			rep.Skipped = append(rep.Skipped, Skip{Mode: m.Name, Reason: why})
			continue
		}
		runnable = append(runnable, m)
	}
	for _, st := range sts {
		for _, m := range runnable {
			var res Result
			if ctx.Err() != nil {
				res = Result{Story: st.Name, Mode: m.Name, Err: "not run: interrupted"}
			} else {
				res = runOne(ctx, st, m, srv.ep, runID)
			}
			rep.Results = append(rep.Results, res)
			if cfg.Progress != nil {
				cfg.Progress(res)
			}
		}
	}
	return rep, ctx.Err()
}

// choose resolves the names, defaulting to all.
func choose(storyNames, modeNames []string) ([]storySpec, []modeSpec, error) {
	if len(storyNames) == 0 {
		storyNames = StoryNames()
	}
	if len(modeNames) == 0 {
		modeNames = ModeNames()
	}
	var sts []storySpec
	for _, n := range storyNames {
		s, ok := lookupStory(n)
		if !ok {
			return nil, nil, fmt.Errorf("story: unknown story %q (have %v)", n, StoryNames())
		}
		sts = append(sts, s)
	}
	var ms []modeSpec
	for _, n := range modeNames {
		m, ok := lookupMode(n)
		if !ok {
			return nil, nil, fmt.Errorf("story: unknown mode %q (have %v)", n, ModeNames())
		}
		ms = append(ms, m)
	}
	return sts, ms, nil
}

// logOf returns where the lab's messages go.
func logOf(env lab.Env) io.Writer {
	if env.Log != nil {
		return env.Log
	}
	return io.Discard
}

// serverSet is the lab services the stories run against.
type serverSet struct {
	lab     *lab.Lab
	ep      endpoints
	missing map[string]string // service → why it is unavailable
	servers []string
}

// unavailable says why mode m cannot run, or "".
func (s *serverSet) unavailable(m modeSpec) string {
	if why := s.missing["redis"]; why != "" {
		return "no Redis (it holds every mode's data): " + why
	}
	if m.needs != "" {
		if why := s.missing[m.needs]; why != "" {
			return fmt.Sprintf("no %s: %s", m.needs, why)
		}
	}
	return ""
}

// openServers opens, through the lab, Redis and what the modes need
// besides: Redlock's five Redis servers, ZooKeeper, etcd, MariaDB.
func openServers(ctx context.Context, env lab.Env, ms []modeSpec) (*serverSet, error) {
	needs := map[string]bool{}
	for _, m := range ms {
		if m.needs != "" {
			needs[m.needs] = true
		}
	}
	names := []string{"redis"}
	for _, n := range []string{"etcd", "zookeeper", "mysql"} {
		if needs[n] {
			names = append(names, n)
		}
	}
	l, err := lab.OpenLab(ctx, names, env)
	if err != nil {
		return nil, err
	}
	s := &serverSet{lab: l, missing: map[string]string{}}
	for _, sk := range l.Skipped() {
		s.missing[sk.Name] = sk.Reason
	}
	for _, name := range names {
		srv, ok := l.Server(name)
		if !ok {
			continue
		}
		switch name {
		case "redis":
			o, err := redis.ParseURL(srv.URL)
			if err != nil {
				s.missing["redis"] = err.Error()
				continue
			}
			s.ep.Redis = redisAddrOf(o)
		case "etcd":
			s.ep.Etcd = srv.URL
		case "zookeeper":
			s.ep.ZK = srv.URL
		case "mysql":
			s.ep.MySQL = srv.URL
		}
	}
	if needs["redlock"] {
		rl, err := l.OpenRedlock(ctx)
		if err != nil {
			s.missing["redlock"] = err.Error()
		} else {
			for _, c := range rl.RedlockClients() {
				s.ep.Redlock = append(s.ep.Redlock, redisAddrOf(c.Options()))
			}
		}
	}
	if err := ctx.Err(); err != nil {
		_ = l.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	for _, info := range l.Infos() {
		s.servers = append(s.servers, info.Server)
	}
	return s, nil
}

// runOne runs story st in mode m.
func runOne(ctx context.Context, st storySpec, m modeSpec, ep endpoints, runID string) (res Result) {
	res = Result{Story: st.Name, Mode: m.Name}
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	spec := runSpec{Story: st.Name, Mode: m.Name, NS: runID + "." + st.Name + "." + m.Name, TTL: st.ttl,
		Start: time.Now().UnixNano(), Initial: st.initial, Endpoints: ep}
	rec := newRecorder(ctx)
	defer rec.cancel()
	r, err := openRun(ctx, spec, rec)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	rec.r, r.rec = r, rec
	defer r.close()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := r.cleanup(cctx); err != nil {
			res.Err = join(res.Err, "cleaning up: "+err.Error())
		}
	}()
	if err := r.seed(ctx); err != nil {
		res.Err = "seeding the stock: " + err.Error()
		return res
	}
	r.start = time.Now()
	r.spec.Start = r.start.UnixNano()
	serr := st.script(ctx, r)
	res.Duration = r.at()
	res.Events, res.Clients = rec.stop()
	if serr != nil {
		res.Err = serr.Error()
	}
	if err := r.judge(context.WithoutCancel(ctx), &res); err != nil {
		res.Err = join(res.Err, err.Error())
	}
	if res.Err != "" {
		res.Safe = false
	}
	return res
}

// Problems returns what makes a report a failure: runs that failed, and
// runs of the fenced and occ modes (occkit's promises) that lost an
// update or accepted a stale write. Unfenced locks losing updates is the
// expected, reported outcome, not a problem.
func Problems(r *Report) []string {
	var out []string
	for _, res := range r.Results {
		switch {
		case res.Err != "":
			out = append(out, fmt.Sprintf("%s/%s: %s", res.Story, res.Mode, res.Err))
		case slices.Contains([]string{ModeFenced, ModeOCC}, res.Mode) && !res.Safe:
			out = append(out, fmt.Sprintf("%s/%s: occkit's promise broken: %s", res.Story, res.Mode, res.Verdict))
		}
	}
	return out
}

var errNoChild = errors.New("story: the child process did not start as a story client (does the binary call story.ChildMain first thing?)")
