package lab

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/servers"
)

// envDynaliteURL names a dynalite server (http://host:port) for the
// dynamodb backend; when it is unset, the lab runs minidyn's server in
// process. dynalite has no TransactWriteItems: multi-key cells are then
// not applicable.
const envDynaliteURL = servers.EnvDynaliteURL

var dynamoSpecs = []backendSpec{
	{
		Name:  "dynamodb",
		About: "dynamocas on a DynamoDB-compatible server: minidyn's, in process (TransactWriteItems included), or dynalite at OCCKIT_DYNALITE_URL (no TransactWriteItems)",
		Open:  openDynamo,
	},
}

type dynamoBackend struct {
	env        *Env
	url        string // the server's own URL (not the proxy's)
	cli        *dynamodb.Client
	closeIdle  func()
	minidyn    *servers.Minidyn
	server     string
	durability string
	// noCommit says why the server cannot commit several keys ("" when
	// it can).
	noCommit string

	// The lease lock of hybrid and adaptive: DynamoDB has none, so one
	// from another service, chosen at the first cell that needs it.
	lockMu     sync.Mutex
	lockFrom   dataBackend // the redis backend, or nil: in process
	lockerDesc string      // "": not chosen yet
}

func openDynamo(_ context.Context, env *Env) (service, error) {
	b := &dynamoBackend{env: env}
	if u := env.getenv(envLabMinidynURL); u != "" { // a --procs child
		b.url = u
		b.server = "minidyn at " + u + ", the parent process's"
		b.durability = "none (minidyn keeps its tables in process memory)"
	} else if u := env.getenv(envDynaliteURL); u != "" {
		b.url = u
		b.server = "dynalite at " + redactURL(u) + " (" + envDynaliteURL + ")"
		b.durability = "as the server was started (dynalite keeps its tables in memory unless given --path; not checked)"
		b.noCommit = "dynalite has no TransactWriteItems, so no atomic multi-key commit (run without " + envDynaliteURL + " for minidyn, which has it)"
	} else {
		b.minidyn = servers.StartMinidyn()
		b.url = b.minidyn.URL
		b.server = fmt.Sprintf("minidyn %s's DynamoDB HTTP server in process at %s, started by the lab", moduleVersion("github.com/truora/minidyn"), b.minidyn.URL)
		b.durability = "none (minidyn keeps its tables in process memory)"
	}
	u, err := env.dialURL(b.url)
	if err != nil {
		_ = b.Close(context.Background())
		return nil, fmt.Errorf("%w: %w", errUnavailable, err)
	}
	b.server += env.via()
	b.cli, b.closeIdle = servers.NewDynamoClient(u)
	env.logf("dynamodb: %s; %s", b.server, b.durability)
	return b, nil
}

var dynamoTuning = retryTuning{Retryable: dynamocas.Retryable}

func (b *dynamoBackend) Info() backendInfo {
	b.lockMu.Lock()
	locker := b.lockerDesc
	b.lockMu.Unlock()
	if locker == "" {
		locker = "not chosen yet: rediscas.Locker when the redis backend is open, else hybrid.NewLocalLocker (in process)"
	}
	return backendInfo{
		Name:       "dynamodb",
		Server:     b.server,
		Durability: b.durability,
		Locker:     locker,
		BackOff:    describeBackOff(dynamoTuning),
	}
}

func (b *dynamoBackend) tuning() retryTuning { return dynamoTuning }

// envLabMinidynURL passes the lab's minidyn server to its --procs
// children.
const envLabMinidynURL = "OCCKIT_LAB_MINIDYN_URL"

// childEnv implements childEnver.
func (b *dynamoBackend) childEnv() []string {
	if b.minidyn != nil {
		return []string{envLabMinidynURL + "=" + b.url}
	}
	return []string{envDynaliteURL + "=" + b.url}
}

// MultiKeyUnsupported implements multiKeyLimiter.
func (b *dynamoBackend) MultiKeyUnsupported() string { return b.noCommit }

// NewStore creates a table for the cell (dynamocas.CreateTable: partition
// key "pk", on-demand) and deletes it afterwards.
func (b *dynamoBackend) NewStore(ctx context.Context, ns string) (cas.Store, func(context.Context) error, error) {
	s, err := dynamocas.New(b.cli, dynamocas.Config{Table: ns})
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.CreateTable(cctx); err != nil {
		return nil, nil, err
	}
	drop := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := b.cli.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(ns)})
		return err
	}
	return s, drop, nil
}

func (b *dynamoBackend) openStore(_ context.Context, ns string) (cas.Store, error) {
	return dynamocas.New(b.cli, dynamocas.Config{Table: ns})
}

// NewLocker returns the lease lock hybrid and adaptive use on DynamoDB,
// which has no lock of its own: the redis backend's (rediscas.Locker) when
// Redis is open in this run, else the in-process hybrid.NewLocalLocker.
// The choice is made once, at the first cell that needs it, and stated in
// Info.
func (b *dynamoBackend) NewLocker(ctx context.Context, ns string) (hybrid.Locker, func(context.Context) error, error) {
	b.lockMu.Lock()
	if b.lockerDesc == "" {
		b.lockerDesc = "hybrid.NewLocalLocker (in process, 10 s TTL): DynamoDB has no lock of its own and Redis was not open"
		if svc, ok := b.env.service("redis"); ok {
			if rb, ok := svc.(dataBackend); ok {
				b.lockFrom = rb
				b.lockerDesc = "the redis backend's rediscas.Locker (SET PX with INCR fencing tokens; waiters poll): DynamoDB has no lock of its own"
			}
		}
	}
	from := b.lockFrom
	b.lockMu.Unlock()
	if from != nil {
		return from.NewLocker(ctx, ns)
	}
	return hybrid.NewLocalLocker(10 * time.Second), func(context.Context) error { return nil }, nil
}

func (b *dynamoBackend) Close(context.Context) error {
	if b.closeIdle != nil {
		b.closeIdle()
		b.closeIdle = nil
	}
	if b.minidyn != nil {
		b.minidyn.Close()
		b.minidyn = nil
	}
	return nil
}
