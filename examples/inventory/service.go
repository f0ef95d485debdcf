package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/occ"
	"github.com/occkit/occkit/occhttp"
)

// Item is one stock-keeping unit.
type Item struct {
	SKU   string `json:"sku"`
	Name  string `json:"name"`
	Price int    `json:"price_cents"`
	Stock int    `json:"stock"`
}

// Order is the answer to an accepted purchase.
type Order struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
	Left     int    `json:"left"`
}

// How the service changes stock.
const (
	// modeOCC: occ.Update, a read and a write conditional on the version
	// read, retried on conflict. No lock.
	modeOCC = "occ"
	// modeLease: the code teams run before occkit: take a lease lock with a
	// TTL, read, check, write unconditionally, release. A holder paused
	// past the TTL writes over the sales made meanwhile.
	modeLease = "lease"
)

var (
	errSoldOut = errors.New("inventory: not enough stock")
	errNoItem  = errors.New("inventory: no such item")
	errBadQty  = errors.New("inventory: quantity must be positive")
)

// service is the inventory API over a cas.Store. It is safe for concurrent
// use.
type service struct {
	items  *cas.Typed[Item]
	mode   string
	locker hybrid.Locker // modeLease only
	// beforeWrite runs between the read of an item and the write of its new
	// stock, in both modes: the place where a GC pause, a slow call or a
	// descheduled process strikes. Tests and the comparison pause here.
	beforeWrite func(ctx context.Context, sku string)
	retry       []occ.Option
}

func newService(store cas.Store, mode string, locker hybrid.Locker) *service {
	return &service{
		items:       cas.NewTyped(store, cas.JSON[Item]()),
		mode:        mode,
		locker:      locker,
		beforeWrite: func(context.Context, string) {},
		retry:       []occ.Option{occ.WithMaxAttempts(100)},
	}
}

func key(sku string) string { return "item/" + sku }

// handler returns the HTTP API:
//
//	GET    /items/{sku}       the item, with its ETag
//	PUT    /items/{sku}       create (If-None-Match: *) or replace (If-Match)
//	PATCH  /items/{sku}       edit name or price (If-Match)
//	POST   /items/{sku}/buy   {"quantity": n}: take n from stock (no precondition: the server retries)
//	POST   /items/{sku}/restock {"quantity": n}
func (s *service) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{sku}", s.get)
	mux.HandleFunc("PUT /items/{sku}", s.put)
	mux.HandleFunc("PATCH /items/{sku}", s.patch)
	mux.HandleFunc("POST /items/{sku}/buy", s.buy)
	mux.HandleFunc("POST /items/{sku}/restock", s.restock)
	return mux
}

func (s *service) get(w http.ResponseWriter, r *http.Request) {
	it, v, err := s.items.Get(r.Context(), key(r.PathValue("sku")))
	if err != nil {
		occhttp.WriteError(w, err)
		return
	}
	if occhttp.NotModified(w, r, v) {
		return
	}
	occhttp.SetETag(w, v)
	writeJSON(w, http.StatusOK, it)
}

func (s *service) put(w http.ResponseWriter, r *http.Request) {
	p, err := occhttp.ReadPrecondition(r)
	if err != nil {
		occhttp.WriteError(w, err)
		return
	}
	var it Item
	if err := json.NewDecoder(r.Body).Decode(&it); err != nil || it.Stock < 0 {
		writeJSON(w, http.StatusBadRequest, errorBody("a JSON item with a stock >= 0"))
		return
	}
	it.SKU = r.PathValue("sku")
	v, created, err := occhttp.Put(r.Context(), s.items, key(it.SKU), p, it)
	if err != nil {
		occhttp.WriteError(w, err)
		return
	}
	occhttp.SetETag(w, v)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, it)
}

// patch edits the catalogue fields of an item. It needs If-Match: an edit
// made on a page loaded minutes ago must not undo another one.
func (s *service) patch(w http.ResponseWriter, r *http.Request) {
	p, err := occhttp.ReadPrecondition(r)
	if err != nil {
		occhttp.WriteError(w, err)
		return
	}
	var edit struct {
		Name  *string `json:"name"`
		Price *int    `json:"price_cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&edit); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(err.Error()))
		return
	}
	it, v, err := occhttp.Update(r.Context(), s.items, key(r.PathValue("sku")), p, func(cur Item, _ bool) (Item, error) {
		if edit.Name != nil {
			cur.Name = *edit.Name
		}
		if edit.Price != nil {
			cur.Price = *edit.Price
		}
		return cur, nil
	})
	if err != nil {
		occhttp.WriteError(w, err)
		return
	}
	occhttp.SetETag(w, v)
	writeJSON(w, http.StatusOK, it)
}

func (s *service) buy(w http.ResponseWriter, r *http.Request) {
	s.changeStock(w, r, -1)
}

func (s *service) restock(w http.ResponseWriter, r *http.Request) {
	s.changeStock(w, r, +1)
}

func (s *service) changeStock(w http.ResponseWriter, r *http.Request, sign int) {
	var req struct {
		Quantity int `json:"quantity"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody(err.Error()))
		return
	}
	if req.Quantity <= 0 {
		writeJSON(w, http.StatusBadRequest, errorBody(errBadQty.Error()))
		return
	}
	sku := r.PathValue("sku")
	var (
		it  Item
		err error
	)
	if s.mode == modeLease {
		it, err = s.changeLocked(r.Context(), sku, sign*req.Quantity)
	} else {
		it, err = s.change(r.Context(), sku, sign*req.Quantity)
	}
	switch {
	case errors.Is(err, errSoldOut):
		writeJSON(w, http.StatusConflict, errorBody(err.Error()))
	case errors.Is(err, errNoItem):
		writeJSON(w, http.StatusNotFound, errorBody(err.Error()))
	case errors.Is(err, errBadQty):
		writeJSON(w, http.StatusBadRequest, errorBody(err.Error()))
	case errors.Is(err, cas.ErrConflict):
		// Still conflicting after the retries: busy, try again.
		writeJSON(w, http.StatusServiceUnavailable, errorBody(err.Error()))
	case err != nil:
		occhttp.WriteError(w, err)
	default:
		writeJSON(w, http.StatusOK, Order{SKU: sku, Quantity: req.Quantity, Left: it.Stock})
	}
}

// apply checks and applies a stock change to cur.
func apply(cur Item, exists bool, delta int) (Item, error) {
	switch {
	case !exists:
		return cur, errNoItem
	case delta == 0:
		return cur, errBadQty
	case cur.Stock+delta < 0:
		return cur, errSoldOut
	}
	cur.Stock += delta
	return cur, nil
}

// change is the occkit way: read, check, write only if nobody wrote since
// the read, else read again and redo.
func (s *service) change(ctx context.Context, sku string, delta int) (Item, error) {
	it, _, err := occ.Update(ctx, s.items, key(sku), func(cur Item, exists bool) (Item, error) {
		next, err := apply(cur, exists, delta)
		if err != nil {
			return cur, err
		}
		s.beforeWrite(ctx, sku)
		return next, nil
	}, s.retry...)
	return it, err
}

// changeLocked is the lock way, as it is usually written: the lock is
// trusted, so the write checks nothing. When the holder is paused past the
// lease's TTL, another buyer takes the lock, sells, and then this write
// puts back the stock it read before the pause.
func (s *service) changeLocked(ctx context.Context, sku string, delta int) (Item, error) {
	lease, err := s.locker.Acquire(ctx, key(sku))
	if err != nil {
		return Item{}, err
	}
	defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()
	cur, v, err := s.items.Get(ctx, key(sku))
	if err != nil && !errors.Is(err, cas.ErrNotFound) {
		return Item{}, err
	}
	next, err := apply(cur, v != 0, delta)
	if err != nil {
		return Item{}, err
	}
	s.beforeWrite(ctx, sku)
	return next, s.set(ctx, key(sku), next)
}

// set overwrites the key whatever its version, like a plain SET or UPDATE
// without a version column: what lock-protected code does.
func (s *service) set(ctx context.Context, k string, it Item) error {
	for {
		_, v, err := s.items.Get(ctx, k)
		if err != nil && !errors.Is(err, cas.ErrNotFound) {
			return err
		}
		if _, err = s.items.CompareAndSwap(ctx, k, v, it); !errors.Is(err, cas.ErrConflict) {
			return err
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func errorBody(msg string) map[string]string {
	return map[string]string{"error": strings.TrimPrefix(msg, "inventory: ")}
}

// seed creates the demo items that do not exist yet.
func (s *service) seed(ctx context.Context, items []Item) error {
	for _, it := range items {
		_, err := s.items.CompareAndSwap(ctx, key(it.SKU), 0, it)
		if err != nil && !errors.Is(err, cas.ErrConflict) {
			return fmt.Errorf("seed %s: %w", it.SKU, err)
		}
	}
	return nil
}
