package story

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/benchmarks/internal/backends"
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
	Env backends.Env
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
		if err := srv.close(cctx); err != nil && cfg.Env.Log != nil {
			fmt.Fprintf(cfg.Env.Log, "story: stopping servers: %v\n", err)
		}
	}()
	rep.Servers = srv.servers
	runID := backends.RandomHex(4)
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
	sts, err := pick(stories(), "story", storyNames)
	if err != nil {
		return nil, nil, err
	}
	ms, err := pick(modes(), "mode", modeNames)
	if err != nil {
		return nil, nil, err
	}
	return sts, ms, nil
}

// serverSet is the servers the stories run against.
type serverSet struct {
	open    []*backends.Server
	ep      endpoints
	missing map[string]string // system → why it is unavailable
	servers []string
}

// unavailable says why mode m cannot run, or "".
func (s *serverSet) unavailable(m modeSpec) string {
	if why := s.missing[backends.Redis]; why != "" {
		return "no Redis (it holds every mode's data): " + why
	}
	if m.needs != "" {
		if why := s.missing[m.needs]; why != "" {
			return fmt.Sprintf("no %s: %s", m.needs, why)
		}
	}
	return ""
}

// openServers reaches or starts Redis and what the modes need besides:
// etcd, ZooKeeper, MariaDB, Redlock's five Redis servers.
func openServers(ctx context.Context, env backends.Env, ms []modeSpec) (*serverSet, error) {
	names := []string{backends.Redis}
	for _, n := range []string{backends.Etcd, backends.ZooKeeper, backends.MySQL, backends.Redlock} {
		if slices.ContainsFunc(ms, func(m modeSpec) bool { return m.needs == n }) {
			names = append(names, n)
		}
	}
	s := &serverSet{missing: map[string]string{}}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			_ = s.close(context.WithoutCancel(ctx))
			return nil, err
		}
		srv, err := env.Reach(ctx, name)
		if err != nil {
			s.missing[name] = err.Error()
			continue
		}
		s.open = append(s.open, srv)
		s.servers = append(s.servers, name+" "+srv.Where)
		switch name {
		case backends.Redis, backends.Redlock:
			for u := range strings.SplitSeq(srv.URL, ",") {
				o, err := redis.ParseURL(u)
				if err != nil {
					s.missing[name] = err.Error()
					break
				}
				if name == backends.Redis {
					s.ep.Redis = redisAddrOf(o)
				} else {
					s.ep.Redlock = append(s.ep.Redlock, redisAddrOf(o))
				}
			}
		case backends.Etcd:
			s.ep.Etcd = srv.URL
		case backends.ZooKeeper:
			s.ep.ZK = srv.URL
		case backends.MySQL:
			s.ep.MySQL = srv.URL
		}
	}
	return s, nil
}

// close stops the servers started here.
func (s *serverSet) close(ctx context.Context) error {
	var errs []error
	for i := len(s.open) - 1; i >= 0; i-- {
		errs = append(errs, s.open[i].Close(ctx))
	}
	return errors.Join(errs...)
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
