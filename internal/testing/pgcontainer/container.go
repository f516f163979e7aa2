// Package pgcontainer starts a PostgreSQL container with testcontainers-go,
// the test harness's last resort when [pgserver.Find] finds no server.
//
// It is for tests only: it links the Docker client and OpenTelemetry, which
// neither the library nor the pglease command may carry. Only
// internal/testing/pgtest imports it.
package pgcontainer

import (
	"context"
	"fmt"

	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/pglease/pglease/internal/pgserver"
)

// Image is the image of the container Start starts.
const Image = "postgres:16-alpine"

// Source is the [pgserver.Server.Source] of a server Start started.
const Source = "testcontainers (" + Image + ")"

// Hint says how to make Start work, for [pgserver.NoServerError.Hints].
const Hint = "run a Docker engine, for testcontainers"

// Start starts a PostgreSQL container, if a Docker engine answers; without
// one it fails at once. [pgserver.Server.Stop] terminates the container; a
// container left behind by a process that died is removed by testcontainers'
// reaper.
func Start(ctx context.Context) (*pgserver.Server, error) {
	ctr, err := tcpostgres.Run(ctx, Image,
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
	s, err := pgserver.Check(ctx, url, Source, terminate)
	if err != nil {
		_ = terminate(ctx)
		return nil, fmt.Errorf("connect to container: %w", err)
	}
	return s, nil
}
