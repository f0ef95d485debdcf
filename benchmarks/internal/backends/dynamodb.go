package backends

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/hybrid"
	"github.com/occkit/occkit/internal/servers"
)

// dynamoDriver is an SDK client with a transport of its own; a namespace
// is a table.
type dynamoDriver struct {
	cli       *dynamodb.Client
	closeIdle func()
	dynalite  bool
}

func connectDynamo(s *Server, opts ClientOptions) (*dynamoDriver, error) {
	u := s.URL
	if opts.Via != "" {
		u = "http://" + opts.Via
	}
	cli, closeIdle := servers.NewDynamoClient(u)
	return &dynamoDriver{cli: cli, closeIdle: closeIdle, dynalite: s.EnvVar == EnvDynaliteURL}, nil
}

func (d *dynamoDriver) store(ns string) (cas.Store, error) {
	return dynamocas.New(d.cli, dynamocas.Config{Table: ns})
}

// create makes the table (dynamocas.CreateTable: partition key "pk",
// on-demand).
func (d *dynamoDriver) create(ctx context.Context, ns string) error {
	s, err := dynamocas.New(d.cli, dynamocas.Config{Table: ns})
	if err != nil {
		return err
	}
	return s.CreateTable(ctx)
}

func (d *dynamoDriver) drop(ctx context.Context, ns string) error {
	_, err := d.cli.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(ns)})
	return err
}

// locker: DynamoDB has no lock service.
func (d *dynamoDriver) locker(_ context.Context, cfg LockerConfig) (hybrid.Locker, func() error, error) {
	return localLocker(cfg)
}

func (d *dynamoDriver) describe(context.Context) (string, string, error) {
	if d.dynalite {
		return "", "as the server was started (dynalite keeps its tables in memory unless given --path; not checked)", nil
	}
	return "", "none (minidyn keeps its tables in process memory)", nil
}

func (d *dynamoDriver) dropScope(context.Context) error { return nil }
func (d *dynamoDriver) native(c *Client)                { c.dyn = d.cli }

func (d *dynamoDriver) close() error {
	d.closeIdle()
	return nil
}
