// Command metrics is a service that runs a workload under a pglease
// supervisor and exports pglease's metrics with the OpenTelemetry SDK: to
// Prometheus, on /metrics, and over OTLP/HTTP as well when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) is
// set. /healthz is the supervisor's health check. It is a module of its
// own, so that the SDK and the exporters stay out of pglease's.
//
//	DATABASE_URL=postgres://... go run .
//	curl -s localhost:9464/metrics | grep pglease_
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pglease/pglease/supervisor"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	// The SDK: a Prometheus reader, and an OTLP one when configured.
	registry := prometheus.NewRegistry()
	promReader, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(promReader)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "" {
		otlp, err := otlpmetrichttp.New(ctx) // endpoint, headers, ... from the OTEL_EXPORTER_OTLP_* variables
		if err != nil {
			return err
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(otlp)))
	}
	provider := sdkmetric.NewMeterProvider(opts...)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = provider.Shutdown(sctx) // flushes the OTLP reader
	}()
	// pglease takes the global provider unless a Config names one
	// (MeterProvider: provider would do the same for one supervisor).
	otel.SetMeterProvider(provider)

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	sup, err := supervisor.NewLease(pool, "outbox-dispatcher", supervisor.Config{
		Observer: func(e supervisor.Event) {
			if e.Kind == supervisor.EventLeaderSeen {
				fmt.Println("standing by")
			}
		},
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	// Unhealthy when the workload still runs 5s after its lease ended.
	mux.Handle("/healthz", sup.HealthHandler(5*time.Second))
	ln, err := net.Listen("tcp", cmp.Or(os.Getenv("LISTEN_ADDR"), "127.0.0.1:9464"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Printf("metrics on http://%s/metrics\n", ln.Addr())

	err = sup.Run(ctx, func(ctx context.Context) error {
		fmt.Println("leading with fence", sup.Fence())
		<-ctx.Done() // dispatch until the lease is lost or the service stops
		return nil
	})
	fmt.Println("stopped:", err)
	return err
}
