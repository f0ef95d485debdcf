package etcdcas

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Defaults for LockerConfig's zero fields.
const (
	DefaultLockPrefix = "occkit-lock/"
	DefaultLockTTL    = 10 * time.Second
)

// errSessionLost is the cause of a lease's Context when the Locker's etcd
// lease expired or was revoked: every lease it had granted is lost.
var errSessionLost = fmt.Errorf("%w: etcdcas: the locker's etcd lease expired or was revoked", hybrid.ErrLeaseLost)

// errLockerClosed is the cause of a lease's Context when its Locker was
// closed, and the error of Acquire on a closed Locker. It matches
// hybrid.ErrLockerClosed as well as hybrid.ErrLeaseLost, so that
// hybrid.Update and Txn end at once instead of asking for a fresh lease.
var errLockerClosed = fmt.Errorf("%w: etcdcas: %w", hybrid.ErrLeaseLost, hybrid.ErrLockerClosed)

// LockerConfig configures a Locker. The zero value is usable.
type LockerConfig struct {
	// Prefix is prepended to lock keys (default "occkit-lock/").
	Prefix string
	// TTL is the etcd lease's time to live, in whole seconds (default
	// 10 s, at least 1 s). A holder that stops renewing (a crashed or
	// paused process) loses its locks after about TTL.
	TTL time.Duration
}

// Locker is a lease lock on etcd, for hybrid.Update and the benchmarks.
//
// All grants of a Locker share one etcd lease (a session), kept alive in
// the background; when it is lost (the process paused or was cut off past
// the TTL), every Lease it granted has its Context cancelled with a cause
// matching hybrid.ErrLeaseLost. A grant is a key
// prefix/<key>\x00<lease>-<n> attached to the session lease; the oldest
// such key of a lock holds it, and the others wait for the deletion
// of their predecessor only (no thundering herd). The fencing token of a
// grant is the revision at which its key was created: etcd revisions grow
// with every write, so every grant of a key gets a larger token than the
// grants before it. Release deletes the grant's key only if it still has
// that creation revision: a late or repeated release cannot remove a newer
// holder's grant (etcd issue #22082).
//
// A Locker is safe for concurrent use. It holds an etcd lease and a
// goroutine renewing it: Close it when done, which revokes the lease and
// so ends every grant still held.
type Locker struct {
	cli    *clientv3.Client
	prefix string
	ttl    int64

	mu      sync.Mutex
	sess    *session
	closed  bool
	seq     atomic.Uint64
	renewed atomic.Uint64 // keep-alive responses: renewals of the sessions' leases
	wg      sync.WaitGroup
	closeCh chan struct{}
}

var (
	_ hybrid.Locker         = (*Locker)(nil)
	_ hybrid.RenewalCounter = (*Locker)(nil)
)

type session struct {
	id      clientv3.LeaseID
	ctx     context.Context
	cancel  context.CancelCauseFunc
	expires atomic.Int64 // unix nanos
}

// NewLocker returns a Locker on the cluster cli talks to.
func NewLocker(cli *clientv3.Client, cfg LockerConfig) (*Locker, error) {
	if cli == nil {
		return nil, errors.New("etcdcas: nil client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultLockPrefix
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultLockTTL
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("etcdcas: lock TTL %v is below etcd's 1 s granularity", cfg.TTL)
	}
	return &Locker{cli: cli, prefix: cfg.Prefix, ttl: int64(cfg.TTL / time.Second), closeCh: make(chan struct{})}, nil
}

// session returns the live session, granting a new lease if needed.
func (l *Locker) session(ctx context.Context) (*session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errLockerClosed
	}
	if l.sess != nil && l.sess.ctx.Err() == nil {
		return l.sess, nil
	}
	granted := time.Now()
	g, err := l.cli.Grant(ctx, l.ttl)
	if err != nil {
		return nil, fmt.Errorf("etcdcas: granting lock lease: %w", err)
	}
	kctx, kcancel := context.WithCancel(context.Background())
	ka, err := l.cli.KeepAlive(kctx, g.ID)
	if err != nil {
		kcancel()
		return nil, fmt.Errorf("etcdcas: keeping lock lease alive: %w", err)
	}
	sctx, scancel := context.WithCancelCause(context.Background())
	s := &session{id: g.ID, ctx: sctx, cancel: scancel}
	s.expires.Store(granted.Add(time.Duration(g.TTL) * time.Second).UnixNano())
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer kcancel()
		for {
			select {
			case resp, ok := <-ka:
				if !ok || resp.TTL <= 0 {
					s.cancel(errSessionLost)
					return
				}
				l.renewed.Add(1)
				// A conservative expiry: the renewal was sent before it
				// was received.
				s.expires.Store(time.Now().Add(time.Duration(resp.TTL)*time.Second - 100*time.Millisecond).UnixNano())
			case <-l.closeCh:
				s.cancel(errLockerClosed)
				return
			}
		}
	}()
	l.sess = s
	return s, nil
}

// Acquire implements hybrid.Locker: it waits until it holds key, or ctx
// ends, or the session is lost. The lease is a *Lease.
func (l *Locker) Acquire(ctx context.Context, key string) (hybrid.Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("etcdcas: acquiring %q: %w", key, cas.ErrNilContext)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, errors.New("etcdcas: empty lock key")
	}
	pfx := l.prefix + key + "\x00"
	var (
		s     *session
		myKey string
		resp  *clientv3.TxnResponse
	)
	// The session's lease may have ended on the server (revoked, or
	// expired during a pause or a partition) before the keepalive loop
	// noticed: etcd then refuses the grant key with "lease not found".
	// That session is dead; the grant is retried once on a new one.
	for try := 0; ; try++ {
		var err error
		s, err = l.session(ctx)
		if err != nil {
			return nil, err
		}
		myKey = fmt.Sprintf("%s%x-%d", pfx, int64(s.id), l.seq.Add(1))
		resp, err = l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", 0)).
			Then(clientv3.OpPut(myKey, "", clientv3.WithLease(s.id)), clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)).
			Commit()
		if err == nil {
			break
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && try == 0 {
			s.cancel(fmt.Errorf("%w: %w", errSessionLost, err))
			continue
		}
		return nil, fmt.Errorf("etcdcas: acquiring %q: %w", key, err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("etcdcas: acquiring %q: grant key %q exists", key, myKey)
	}
	rev := resp.Header.Revision
	lease := &Lease{l: l, key: key, myKey: myKey, token: uint64(rev), sess: s}
	lease.ctx, lease.cancel = context.WithCancelCause(s.ctx)
	owner := resp.Responses[1].GetResponseRange().Kvs
	if len(owner) == 0 || owner[0].CreateRevision != rev {
		if err := l.waitPredecessors(ctx, s, pfx, rev); err != nil {
			// Give the grant back; by revision, so only this one.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = lease.Release(rctx)
			return nil, err
		}
	}
	return lease, nil
}

// waitPredecessors waits until no grant of the lock created before rev
// remains. It watches the nearest predecessor from the current revision
// (a watch from a past revision is only caught up by etcd every 100 ms,
// which made every hand-off of a contended lock take that long) and then
// checks that the predecessor still exists, so that a deletion between the
// read and the watch is not missed.
func (l *Locker) waitPredecessors(ctx context.Context, s *session, pfx string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	for {
		resp, err := l.cli.Get(wctx, pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...)
		if err != nil {
			return l.waitErr(ctx, s, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if err := l.waitDeleted(wctx, string(resp.Kvs[0].Key)); err != nil {
			return l.waitErr(ctx, s, err)
		}
	}
}

// waitDeleted returns when key does not exist.
func (l *Locker) waitDeleted(ctx context.Context, key string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := l.cli.Watch(ctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	created, ok := <-wch
	if !ok {
		return errors.New("etcdcas: watch closed")
	}
	if err := created.Err(); err != nil {
		return err
	}
	// The watch sees every deletion from here on; the key may already be
	// gone.
	g, err := l.cli.Get(ctx, key, clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if g.Count == 0 {
		return nil
	}
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			return nil
		}
	}
	return errors.New("etcdcas: watch closed")
}

func (l *Locker) waitErr(ctx context.Context, s *session, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if s.ctx.Err() != nil {
		return context.Cause(s.ctx)
	}
	return fmt.Errorf("etcdcas: waiting for lock: %w", err)
}

// Renewals implements hybrid.RenewalCounter: the keep-alive responses
// the Locker has received for its sessions' etcd leases, each a renewal
// of every grant of the session (about three per TTL while the Locker
// holds a session).
func (l *Locker) Renewals() uint64 { return l.renewed.Load() }

// Close ends every lease the Locker granted and that was not released:
// their Contexts are cancelled (the cause matches hybrid.ErrLeaseLost) and
// their grants deleted, by revoking the etcd lease they share (the Locker
// stops renewing it; if the revoke fails, Close returns the error and the
// grants run out after the TTL). Acquire fails from then on, also a call
// already waiting, with an error matching hybrid.ErrLeaseLost. The client stays open: it is the caller's. Close is
// safe for concurrent use with the other methods; closing again does
// nothing and returns nil.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	s := l.sess
	close(l.closeCh)
	l.mu.Unlock()
	l.wg.Wait()
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.cli.Revoke(ctx, s.id); err != nil {
		return fmt.Errorf("etcdcas: revoking lock lease: %w", err)
	}
	return nil
}

// Lease is one grant of a Locker, a hybrid.ExpiringLease. Its methods are
// safe for concurrent use.
type Lease struct {
	l      *Locker
	key    string
	myKey  string
	token  uint64
	sess   *session
	ctx    context.Context
	cancel context.CancelCauseFunc
}

var _ hybrid.ExpiringLease = (*Lease)(nil)

// Token implements hybrid.Lease: the revision at which this grant's key was
// created.
func (g *Lease) Token() uint64 { return g.token }

// Context implements hybrid.Lease: it is cancelled when the session's etcd
// lease is lost or the Locker closed (the cause matches
// hybrid.ErrLeaseLost), or the grant is released (hybrid.ErrLeaseReleased).
func (g *Lease) Context() context.Context { return g.ctx }

// Expires implements hybrid.ExpiringLease: it returns when the session's
// etcd lease expires unless renewed, as the client last learned it
// (renewals may have stopped without the client knowing yet: a paused
// process notices late).
func (g *Lease) Expires() time.Time { return time.Unix(0, g.sess.expires.Load()) }

// Release implements hybrid.Lease: it deletes this grant's key only if the
// key still has this grant's creation revision, so that a late or repeated
// Release never removes a newer holder's grant; a repeated Release, or one
// of a lost grant, returns nil. If it fails (ctx ended, etcd unreachable),
// the grant stays until a later Release succeeds or the session ends.
func (g *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("etcdcas: releasing %q: %w", g.key, cas.ErrNilContext)
	}
	g.cancel(hybrid.ErrLeaseReleased)
	_, err := g.l.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(g.myKey), "=", int64(g.token))).
		Then(clientv3.OpDelete(g.myKey)).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdcas: releasing %q: %w", g.key, err)
	}
	return nil
}
