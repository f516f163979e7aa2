package pgleasemigrate_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/pgleasemigrate"
)

// ExampleUp applies pglease's migrations at startup, as a deploy step or a
// service's main would: on an up-to-date database it does nothing.
func ExampleUp() {
	ctx := context.Background()
	databaseURL := os.Getenv("DATABASE_URL")
	if err := pgleasemigrate.Up(ctx, databaseURL); err != nil {
		log.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	var dirty bool
	if err := conn.QueryRow(ctx, "SELECT dirty FROM "+pgleasemigrate.Table).Scan(&dirty); err != nil {
		log.Fatal(err)
	}
	fmt.Println("schema pglease applied, history clean:", !dirty)
	// Output: schema pglease applied, history clean: true
}
