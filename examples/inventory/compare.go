package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
)

// loadConfig is one side-by-side run: buyers hammer one item until it is
// sold out, and every PauseEvery-th write is paused for Pause between the
// read and the write (longer than the lease's TTL).
type loadConfig struct {
	Buyers     int
	Stock      int
	TTL        time.Duration // the lease lock's TTL (lease mode)
	PauseEvery int           // 0: no pauses
	Pause      time.Duration
}

func defaultLoad() loadConfig {
	return loadConfig{Buyers: 16, Stock: 200, TTL: 50 * time.Millisecond, PauseEvery: 25, Pause: 150 * time.Millisecond}
}

// runResult is what one run counted.
type runResult struct {
	Mode     string
	Stock    int // at the start
	Left     int // at the end, as the store says
	Accepted int // orders answered 200
	SoldOut  int // buyers told "not enough stock"
	Busy     int // answers 503 (still conflicting after the retries), retried by the buyer
	Pauses   int
}

// Sold is how many units left the stock.
func (r runResult) Sold() int { return r.Stock - r.Left }

// Lost is how many accepted orders took no unit from the stock: sales
// written over by a paused lock holder, that is units sold twice.
func (r runResult) Lost() int { return r.Accepted - r.Sold() }

// check is the invariant: every accepted order took exactly one unit, and
// the stock never went below zero.
func (r runResult) check() error {
	if r.Left < 0 {
		return fmt.Errorf("%s: stock went negative: %d", r.Mode, r.Left)
	}
	if r.Lost() != 0 {
		return fmt.Errorf("%s: %d orders accepted but %d units sold: %d sales lost", r.Mode, r.Accepted, r.Sold(), r.Lost())
	}
	return nil
}

// runLoad runs cfg against a service in mode over store, through HTTP.
func runLoad(ctx context.Context, store cas.Store, mode string, cfg loadConfig) (runResult, error) {
	res := runResult{Mode: mode, Stock: cfg.Stock}
	svc := newService(store, mode, hybrid.NewLocalLocker(cfg.TTL))
	var writes, pauses atomic.Int64
	svc.beforeWrite = func(ctx context.Context, _ string) {
		if n := writes.Add(1); cfg.PauseEvery > 0 && n%int64(cfg.PauseEvery) == 0 {
			pauses.Add(1)
			t := time.NewTimer(cfg.Pause)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	sku := "load-" + mode + "-" + randomHex()
	if err := svc.seed(ctx, []Item{{SKU: sku, Name: "load test", Stock: cfg.Stock}}); err != nil {
		return res, err
	}
	srv := httptest.NewServer(svc.handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Buyers}}
	defer client.CloseIdleConnections()

	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	for range cfg.Buyers {
		wg.Go(func() {
			for range 4*cfg.Stock + 100 { // bounded: stops by itself
				status, err := post(ctx, client, srv.URL+"/items/"+sku+"/buy", `{"quantity":1}`)
				mu.Lock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				case status == http.StatusOK:
					res.Accepted++
				case status == http.StatusConflict:
					res.SoldOut++
				case status == http.StatusServiceUnavailable:
					res.Busy++
				default:
					if firstErr == nil {
						firstErr = fmt.Errorf("buy: status %d", status)
					}
				}
				stop := err != nil || status == http.StatusConflict || (status != http.StatusOK && status != http.StatusServiceUnavailable)
				mu.Unlock()
				if stop {
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	it, _, err := svc.items.Get(ctx, key(sku))
	if err != nil {
		return res, err
	}
	res.Left, res.Pauses = it.Stock, int(pauses.Load())
	return res, nil
}

func post(ctx context.Context, c *http.Client, url, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// compare runs the lease-lock version and the occkit version side by side
// on stores from newStore and writes the table to w.
func compare(ctx context.Context, w io.Writer, newStore func() cas.Store, cfg loadConfig) ([]runResult, error) {
	var out []runResult
	for _, mode := range []string{modeLease, modeOCC} {
		r, err := runLoad(ctx, newStore(), mode, cfg)
		if err != nil {
			return out, fmt.Errorf("%s: %w", mode, err)
		}
		out = append(out, r)
	}
	fmt.Fprintf(w, "%d buyers, %d units, every %dth write paused %v (lease TTL %v)\n\n",
		cfg.Buyers, cfg.Stock, cfg.PauseEvery, cfg.Pause, cfg.TTL)
	fmt.Fprintf(w, "| version | pauses | orders accepted | units sold | sales lost (oversold) | stock left | invariant |\n")
	fmt.Fprintf(w, "| --- | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range out {
		verdict := "holds"
		if err := r.check(); err != nil {
			verdict = "broken"
		}
		name := map[string]string{modeLease: "lease lock, TTL " + cfg.TTL.String(), modeOCC: "occkit (occ.Update)"}[r.Mode]
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %s |\n", name, r.Pauses, r.Accepted, r.Sold(), r.Lost(), r.Left, verdict)
	}
	return out, nil
}
