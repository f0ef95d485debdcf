package story

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/occkit/occkit/adapters/rediscas"
	"github.com/occkit/occkit/benchmarks/internal/locks"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/ctxwait"
	"github.com/occkit/occkit/occ"
)

// sink is where a client's events go: the runner's recorder, or, in a
// child process, the pipe to the runner.
type sink interface {
	// event records e.
	event(e Event)
	// granted records a Grant event and the grant's ref, which the
	// runner watches on the server to see when it ends.
	granted(e Event, ref string)
	// releasing tells the runner that the client is about to release
	// ref (so that the end of the grant is not taken for an expiry), and
	// returns when the runner knows.
	releasing(ctx context.Context, ref string) error
	// held asks the runner whether ref holds the lock on the server now:
	// the runner looks directly, through no fault (a paused or cut-off
	// client's own connections could not tell).
	held(ctx context.Context, ref string) (bool, error)
}

// hook is what a story does between a client's read and its write: work,
// or wait for the runner to let it go on. attempt counts the tries of one
// sale, from 1.
type hook func(ctx context.Context, attempt int) error

// maxSaleAttempts bounds the tries of a fenced or occ sale.
const maxSaleAttempts = 100

// client is one lane of a story: a lock client (none in occ mode) and a
// data client, both possibly reaching their servers through a fault.
type client struct {
	name  string
	r     *run
	lock  *locker
	rdb   *redis.Client
	store *rediscas.Store

	mu  sync.Mutex
	cur *holding // the grant held now
}

// clientEndpoints are where a client reaches its lock service and its
// data.
type clientEndpoints struct {
	Lock endpoints `json:"lock"`
	Data redisAddr `json:"data"`
}

func newClient(ctx context.Context, r *run, name string, ep clientEndpoints) (*client, error) {
	c := &client{name: name, r: r, rdb: ep.Data.client()}
	var err error
	if c.store, err = rediscas.New(c.rdb, rediscas.Config{Prefix: r.redisKey("cas:")}); err != nil {
		c.close()
		return nil, err
	}
	if r.mode.data != plainData {
		dataKey := r.redisKey("cas:") + "d:stock" // the stock's hash in rediscas's layout: <prefix>d:<key>
		c.rdb.AddHook(refusalHook{rdb: c.rdb, client: name, dataKey: dataKey, list: r.refusedKey()})
	}
	if r.lock != nil {
		if c.lock, err = r.lock.newLocker(ctx, ep.Lock); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

func (c *client) close() {
	if c.lock != nil {
		c.lock.close()
	}
	c.rdb.Close()
}

// emit sends an event of this client's lane, timed now.
func (c *client) emit(e Event) Event {
	e.At, e.Client = c.r.at(), c.name
	c.r.sink.event(e)
	return e
}

func ptr(v int64) *int64 { return &v }

// sale sells one item: the mode's read-modify-write, with h between the
// read and the write of every attempt.
func (c *client) sale(ctx context.Context, h hook) error {
	if h == nil {
		h = func(context.Context, int) error { return nil }
	}
	switch c.r.mode.data {
	case plainData:
		return c.salePlain(ctx, h)
	case fencedData:
		return c.saleFenced(ctx, h)
	default:
		return c.saleOCC(ctx, h)
	}
}

// holding is a grant the client holds, and the goroutine that reports
// its renewals and its loss as the client learns them.
type holding struct {
	g    *locks.Grant
	stop chan struct{}
	done chan struct{}
}

func (c *client) acquire(ctx context.Context) (*holding, error) {
	c.emit(Event{Kind: Acquire})
	g, err := c.lock.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquiring the lock: %w", err)
	}
	detail := ""
	if g.Token != 0 && c.r.mode.data == plainData {
		detail = fmt.Sprintf("token %d, which the write will not carry", g.Token)
	}
	e := Event{At: c.r.at(), Client: c.name, Kind: Grant, Token: g.Token, Detail: detail}
	c.r.sink.granted(e, g.Ref)
	h := &holding{g: g, stop: make(chan struct{}), done: make(chan struct{})}
	go c.watch(h)
	c.mu.Lock()
	c.cur = h
	c.mu.Unlock()
	return h, nil
}

// currentRef returns the ref of the grant the client holds, or "".
func (c *client) currentRef() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return ""
	}
	return c.cur.g.Ref
}

// watch reports the renewals of h's grant (as the client sees its expiry
// move) and its loss, until h is released.
func (c *client) watch(h *holding) {
	defer close(h.done)
	last, renews := h.g.Expires()
	var tick <-chan time.Time
	if renews {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-h.stop:
			return
		case <-h.g.Lost():
			c.emit(Event{Kind: Note, Token: h.g.Token, Detail: c.name + " learns its lock is lost: " + h.g.LostCause()})
			return
		case <-tick:
			if e, _ := h.g.Expires(); e.After(last.Add(c.r.spec.TTL / 10)) {
				c.emit(Event{Kind: Renew, Token: h.g.Token, Detail: fmt.Sprintf("lease renewed until +%v", time.Until(e).Round(10*time.Millisecond))})
				last = e
			}
		}
	}
}

// release gives h back, after asking the lock service whether it still
// held it (for the event's detail).
func (c *client) release(ctx context.Context, h *holding) {
	close(h.stop)
	<-h.done
	c.mu.Lock()
	c.cur = nil
	c.mu.Unlock()
	ref := h.g.Ref
	held, herr := c.r.sink.held(ctx, ref)
	detail := ""
	if herr == nil && !held {
		detail = "the lock was no longer " + c.name + "'s: the release deleted nothing"
	}
	if err := c.r.sink.releasing(ctx, ref); err != nil {
		detail = join(detail, "not released: "+err.Error())
		c.emit(Event{Kind: Release, Token: h.g.Token, Detail: detail})
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// ErrNotHeld: the release deleted nothing, as the detail says.
	if err := h.g.Release(rctx); err != nil && (held || herr != nil || !errors.Is(err, locks.ErrNotHeld)) {
		detail = join(detail, "release failed: "+err.Error())
	}
	c.emit(Event{Kind: Release, Token: h.g.Token, Detail: detail})
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// heldNow asks the lock service, directly, whether h still holds the
// lock: what the write's staleness is judged by.
func (c *client) heldNow(ctx context.Context, h *holding) bool {
	held, err := c.r.sink.held(ctx, h.g.Ref)
	return err == nil && held
}

// appendAudit records an accepted write in the audit list (the rediscas
// modes; a plain write appends in its own MULTI).
func (c *client) appendAudit(ctx context.Context, e auditEntry) error {
	b, _ := json.Marshal(e)
	return c.rdb.RPush(ctx, c.r.auditKey(), b).Err()
}

// salePlain: lock, GET, SET read-1 blindly, unlock.
func (c *client) salePlain(ctx context.Context, h hook) error {
	g, err := c.acquire(ctx)
	if err != nil {
		return err
	}
	defer c.release(ctx, g)
	tok := g.g.Token
	v, err := c.rdb.Get(ctx, c.r.stockKey()).Int64()
	if err != nil {
		return fmt.Errorf("reading the stock: %w", err)
	}
	c.emit(Event{Kind: Read, Token: tok, Value: ptr(v)})
	if err := h(ctx, 1); err != nil {
		return err
	}
	held := c.heldNow(ctx, g)
	e := auditEntry{Client: c.name, Read: v, Wrote: v - 1, Held: held, Token: tok}
	b, _ := json.Marshal(e)
	if _, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, c.r.stockKey(), v-1, 0)
		p.RPush(ctx, c.r.auditKey(), b)
		return nil
	}); err != nil {
		return fmt.Errorf("writing the stock: %w", err)
	}
	detail := "a plain SET: nothing checks the lock"
	if !held {
		detail = "a plain SET, accepted although " + c.name + " no longer held the lock"
	}
	c.emit(Event{Kind: WriteAccepted, Token: tok, Value: ptr(v - 1), Stale: !held, Detail: detail})
	return nil
}

// saleFenced: lock, read with the version, fenced conditional write with
// the lease's token, unlock; a refused write starts again with a new
// lease (as hybrid.Update does).
func (c *client) saleFenced(ctx context.Context, h hook) error {
	stock := typed(c.store)
	for attempt := 1; ; attempt++ {
		g, err := c.acquire(ctx)
		if err != nil {
			return err
		}
		tok := g.g.Token
		v, ver, err := stock.Get(ctx, "stock")
		if err != nil {
			c.release(ctx, g)
			return fmt.Errorf("reading the stock: %w", err)
		}
		c.emit(Event{Kind: Read, Token: tok, Value: ptr(v), Detail: fmt.Sprintf("version %d", ver)})
		if err := h(ctx, attempt); err != nil {
			c.release(ctx, g)
			return err
		}
		held := c.heldNow(ctx, g)
		b, _ := json.Marshal(v - 1)
		nv, err := c.store.CompareAndSwapFenced(ctx, "stock", ver, tok, b)
		switch {
		case err == nil:
			aerr := c.appendAudit(ctx, auditEntry{Client: c.name, Read: v, Wrote: v - 1, Held: held, Token: tok, Version: uint64(nv)})
			detail := fmt.Sprintf("fenced write with token %d accepted", tok)
			if !held {
				detail += ", although " + c.name + " no longer held the lock"
			}
			c.emit(Event{Kind: WriteAccepted, Token: tok, Value: ptr(v - 1), Stale: !held, Detail: detail})
			c.release(ctx, g)
			return aerr
		case errors.Is(err, cas.ErrFenced):
			c.emit(Event{Kind: WriteRejected, Token: tok, Value: ptr(v - 1),
				Detail: fmt.Sprintf("refused by the store (ErrFenced): a token larger than %d has written the stock", tok)})
		case errors.Is(err, cas.ErrConflict):
			c.emit(Event{Kind: WriteRejected, Token: tok, Value: ptr(v - 1),
				Detail: fmt.Sprintf("refused by the store (conflict): version %d is no longer current", ver)})
		default:
			c.release(ctx, g)
			return fmt.Errorf("writing the stock: %w", err)
		}
		c.release(ctx, g)
		if attempt == maxSaleAttempts {
			return fmt.Errorf("no sale after %d attempts", attempt)
		}
		if ctxwait.Sleep(ctx, time.Duration(attempt)*5*time.Millisecond) != nil {
			return ctx.Err()
		}
	}
}

// saleOCC: occ.Update over a store that records its conditional writes.
func (c *client) saleOCC(ctx context.Context, h hook) error {
	attempt := 0
	rs := &recordingStore{Store: c.store, c: c}
	_, _, err := occ.Update(ctx, typed(rs), "stock", func(cur int64, _ bool) (int64, error) {
		attempt++
		rs.read = cur
		c.emit(Event{Kind: Read, Value: ptr(cur)})
		if err := h(ctx, attempt); err != nil {
			return 0, err
		}
		return cur - 1, nil
	}, occ.WithMaxAttempts(maxSaleAttempts))
	return err
}

// recordingStore records the conditional writes occ.Update makes.
type recordingStore struct {
	*rediscas.Store
	c    *client
	read int64 // what the current attempt read
}

func (s *recordingStore) CompareAndSwap(ctx context.Context, key string, expected cas.Version, value []byte) (cas.Version, error) {
	nv, err := s.Store.CompareAndSwap(ctx, key, expected, value)
	var wrote int64
	_ = json.Unmarshal(value, &wrote)
	switch {
	case err == nil:
		if aerr := s.c.appendAudit(ctx, auditEntry{Client: s.c.name, Read: s.read, Wrote: wrote, Held: true, Version: uint64(nv)}); aerr != nil {
			return nv, aerr
		}
		s.c.emit(Event{Kind: WriteAccepted, Value: ptr(wrote), Detail: fmt.Sprintf("conditional write: version %d was still current", expected)})
	case errors.Is(err, cas.ErrConflict):
		s.c.emit(Event{Kind: WriteRejected, Value: ptr(wrote),
			Detail: fmt.Sprintf("refused by the store (conflict): version %d is no longer current; occ.Update retries with the current value", expected)})
	}
	return nv, err
}
