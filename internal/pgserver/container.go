package pgserver

import (
	"context"
	"fmt"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// containerImage is the image of the container Find starts as a last resort.
const containerImage = "postgres:16-alpine"

// startContainer starts a PostgreSQL container with testcontainers-go, if a
// Docker engine answers. Without one it fails at once.
func startContainer(ctx context.Context) (*Server, error) {
	ctr, err := tcpostgres.Run(ctx, containerImage,
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		// Replaces the module's default command, which turns fsync off:
		// durability tests and benchmarks need the default.
		testcontainers.WithCmd("postgres", "-c", "max_connections=200"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, err
	}
	terminate := func(ctx context.Context) error { return ctr.Terminate(ctx) }
	url, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = terminate(ctx)
		return nil, fmt.Errorf("container address: %w", err)
	}
	s, err := probe(ctx, url, "testcontainers ("+containerImage+")", checkTimeout)
	if err != nil {
		_ = terminate(ctx)
		return nil, fmt.Errorf("connect to container: %w", err)
	}
	s.stop = terminate
	return s, nil
}
