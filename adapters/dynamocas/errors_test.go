package dynamocas_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/occkit/occkit/adapters/dynamocas"
	"github.com/occkit/occkit/cas"
	"github.com/occkit/occkit/internal/dynamotest"
)

// withStatus wraps err the way the SDK does for an answer with status.
func withStatus(status int, err error) error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "UpdateItem", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: err}}
}

func cancelled(codes ...string) error {
	tce := &types.TransactionCanceledException{Message: aws.String("cancelled")}
	for _, c := range codes {
		tce.CancellationReasons = append(tce.CancellationReasons, types.CancellationReason{Code: aws.String(c)})
	}
	return withStatus(400, tce)
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"Nil", nil, false},
		{"ProvisionedThroughputExceeded", withStatus(400, &types.ProvisionedThroughputExceededException{}), true},
		{"Throttling", withStatus(400, &types.ThrottlingException{}), true},
		{"RequestLimitExceeded", withStatus(400, &types.RequestLimitExceeded{}), true},
		{"TransactionConflictException", withStatus(400, &types.TransactionConflictException{}), true},
		{"TransactionInProgress", withStatus(400, &types.TransactionInProgressException{}), true},
		{"InternalServerError", withStatus(500, &types.InternalServerError{}), true},
		{"ServiceUnavailable", withStatus(503, &smithy.GenericAPIError{Code: "ServiceUnavailable"}), true},
		{"CancelledByTransactionConflict", cancelled("None", "TransactionConflict"), true},
		{"CancelledByThrottling", cancelled("ThrottlingError", "None"), true},
		{"CancelledByCondition", cancelled("None", "ConditionalCheckFailed"), false},
		{"CancelledByConditionAndConflict", cancelled("TransactionConflict", "ConditionalCheckFailed"), false},
		{"CancelledByValidation", cancelled("ValidationError"), false},
		{"ConditionFailed", withStatus(400, &types.ConditionalCheckFailedException{}), false},
		{"Validation", withStatus(400, &smithy.GenericAPIError{Code: "ValidationException"}), false},
		{"ResourceNotFound", withStatus(400, &types.ResourceNotFoundException{}), false},
		{"Conflict", &cas.ConflictError{Key: "k"}, false},
		{"Ambiguous5xx", &cas.AmbiguousError{Key: "k", Err: withStatus(500, &types.InternalServerError{})}, false},
		{"RefusalCut", withStatus(400, &smithy.DeserializationError{Err: io.ErrUnexpectedEOF}), true},
		{"WriteSuccessCut", withStatus(200, &smithy.DeserializationError{Err: io.ErrUnexpectedEOF}), false},
		{"AmbiguousCut", &cas.AmbiguousError{Key: "k", Err: withStatus(200, &smithy.DeserializationError{Err: io.ErrUnexpectedEOF})}, false},
		{"DialRefused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"ReadReset", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset")}, false},
		{"Canceled", fmt.Errorf("w: %w", context.Canceled), false},
		{"DeadlineExceeded", context.DeadlineExceeded, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := dynamocas.Retryable(tc.err); got != tc.want {
				t.Fatalf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestDeadServer checks errors when nothing answers: a read is
// retryable; a write whose connection could not be made certainly did not
// apply (retryable, not ambiguous); both keep the native error reachable.
func TestDeadServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cli := dynamotest.Client(t, dynamotest.Server{URL: "http://" + addr})
	s, err := dynamocas.New(cli, dynamocas.Config{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var op *net.OpError
	_, err = s.Get(ctx, "k")
	if !dynamocas.Retryable(err) || !errors.As(err, &op) {
		t.Fatalf("get from a dead server: %v, want retryable with the *net.OpError inside", err)
	}
	_, err = s.CompareAndSwap(ctx, "k", 0, []byte("v"))
	if !dynamocas.Retryable(err) || errors.Is(err, cas.ErrAmbiguous) || !errors.As(err, &op) {
		t.Fatalf("write to a dead server: %v, want retryable, not ambiguous", err)
	}
}
